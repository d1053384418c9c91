package cloak

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestDefaultTags: the defaults the Options tags state are those the
// protocol applies.
func TestDefaultTags(t *testing.T) {
	o, _, err := Options{}.withDefaults(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	kvtest.CheckDefaultTags(t, "cloak", o)
}
