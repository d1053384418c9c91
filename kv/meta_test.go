package kv

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/seal"
)

// TestOlderFormatPointsToDumpAndLoad: a store whose metadata records an
// older storage format is refused, and the error names dump and load as
// the way to move its data to this build.
func TestOlderFormatPointsToDumpAndLoad(t *testing.T) {
	ctx := context.Background()
	Register(Protocol{Name: "kv-test-meta", Open: noStore})
	keys, err := seal.NewKeys(make([]byte, seal.MasterKeySize))
	if err != nil {
		t.Fatal(err)
	}
	b := mem.New()
	cfg := withDefaults(Config{Protocol: "kv-test-meta", Backend: b, Keys: keys})
	old := metaOf(cfg)
	old.Format = metaFormat - 1
	if err := writeMeta(ctx, b, keys, old); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, cfg)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("Open of an older format = %v, want ErrMismatch", err)
	}
	for _, want := range []string{"oblivkv dump", "oblivkv load", "docs/OPERATIONS.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
