package backend_test

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/backendtest"
	"github.com/oblivkv/oblivkv/backend/mem"
)

func TestPrefixConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return backend.WithPrefix(mem.New(), "run1/")
	})
}

// TestPrefixIsolatesAndDrops shows two prefixed views of one storage see
// only their own addresses, and Drop removes exactly one view's data.
func TestPrefixIsolatesAndDrops(t *testing.T) {
	ctx := context.Background()
	raw := mem.New()
	a, b := backend.WithPrefix(raw, "a/"), backend.WithPrefix(raw, "b/")
	for i, view := range []backend.Backend{a, b} {
		items := make([]backend.Item, 1500) // more than one Drop batch
		for j := range items {
			items[j] = backend.Item{Addr: string(rune('k')) + string(rune(j)), Value: []byte{byte(i)}}
		}
		if err := view.Write(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	vals, err := a.Read(ctx, []string{"k\x00"})
	if err != nil || !bytes.Equal(vals[0], []byte{0}) {
		t.Fatalf("view a reads %v, %v; want its own value 0", vals, err)
	}
	var seen []string
	if err := b.Scan(ctx, "", func(addr string) error { seen = append(seen, addr); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(seen)
	if len(seen) != 1500 || seen[0] != "k\x00" {
		t.Fatalf("view b scans %d addresses starting %q; want 1500 without the prefix", len(seen), seen[0])
	}
	if err := backend.Drop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if raw.Len() != 1500 {
		t.Fatalf("after dropping view a the storage holds %d addresses; want view b's 1500", raw.Len())
	}
	vals, err = b.Read(ctx, []string{"k\x00"})
	if err != nil || !bytes.Equal(vals[0], []byte{1}) {
		t.Fatalf("view b reads %v, %v after dropping a; want 1", vals, err)
	}
}

// TestPrefixFences: a fence's key is an address like any other, stored
// under the view's prefix, so two views fence independently.
func TestPrefixFences(t *testing.T) {
	ctx := context.Background()
	raw := mem.New()
	a, b := backend.WithPrefix(raw, "a/"), backend.WithPrefix(raw, "b/")
	if err := a.WriteFenced(ctx, backend.Fence{Key: "fence", Token: 5}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := backend.PipelineFenced(ctx, b, backend.Fence{Key: "fence", Token: 1}, nil, nil); err != nil {
		t.Fatalf("view b fenced out by view a's token: %v", err)
	}
	vals, err := raw.Read(ctx, []string{"a/fence", "b/fence"})
	if err != nil || !bytes.Equal(vals[0], backend.EncodeToken(5)) || !bytes.Equal(vals[1], backend.EncodeToken(1)) {
		t.Fatalf("storage holds the tokens %x, %v; want 5 at a/fence and 1 at b/fence", vals, err)
	}
	if err := a.WriteFenced(ctx, backend.Fence{Key: "fence", Token: 4}, nil); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("view a with an older token = %v, want ErrFenced", err)
	}
}
