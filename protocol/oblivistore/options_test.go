package oblivistore

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestDefaultTags: the defaults the Options tags state are those the
// protocol applies.
func TestDefaultTags(t *testing.T) {
	kvtest.CheckDefaultTags(t, "oblivistore", Options{}.withDefaults(1<<16))
}
