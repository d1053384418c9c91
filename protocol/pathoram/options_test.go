package pathoram

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestDefaultTags: the defaults the Options tags state are those the
// protocol applies.
func TestDefaultTags(t *testing.T) {
	o, err := optionsOf(nil)
	if err != nil {
		t.Fatal(err)
	}
	kvtest.CheckDefaultTags(t, "pathoram", o)
}
