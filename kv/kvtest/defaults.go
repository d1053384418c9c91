package kvtest

import (
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/kv/options"
)

// CheckDefaultTags fails t where an option of protocol whose `default` tag
// is a constant (see kv.Protocol.Options) defaults to another value, so the
// defaults `oblivkv options` shows, and those setup drops from a store's
// recorded settings, are the protocol's own. resolved is the protocol's
// zero Options with its defaults applied (for a store of any capacity:
// constant defaults do not depend on it).
func CheckDefaultTags(t testing.TB, protocol string, resolved any) {
	t.Helper()
	got := reflect.ValueOf(resolved)
	for _, o := range options.List(protocol) {
		if !o.Constant {
			continue
		}
		tagged, err := options.Parse(protocol, []string{o.Name + "=" + o.Default})
		if err != nil {
			t.Fatal(err)
		}
		if want := reflect.ValueOf(tagged).FieldByName(o.Name); !got.FieldByName(o.Name).Equal(want) {
			t.Errorf("%s option %s defaults to %v; its default tag says %s", protocol, o.Name, got.FieldByName(o.Name), o.Default)
		}
	}
}
