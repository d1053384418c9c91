package pathoram

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestDefaultTags: each default is stated once, in its tag, and is the one
// the protocol applies.
func TestDefaultTags(t *testing.T) {
	kvtest.CheckDefaultTags[Options](t, "pathoram")
}
