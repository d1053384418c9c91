package backend_test

import (
	"context"
	"errors"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
)

// TestWithFenceFencesEveryWrite: two drivers of one machine over the same
// storage, each through WithFence: once the newer has written, the
// older's Write is refused whole, the older is deposed (its every later
// call fails without reaching storage), and storage holds the newer's
// data.
func TestWithFenceFencesEveryWrite(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	var deposed backend.Deposition
	driver := func(token uint64, d *backend.Deposition) backend.Backend {
		return backend.WithFence(store, func() backend.Fence { return backend.Fence{Key: "fence/m", Token: token} }, d)
	}
	older, newer := driver(1, &deposed), driver(2, new(backend.Deposition))
	if err := older.Write(ctx, []backend.Item{{Addr: "a", Value: []byte("old")}}); err != nil {
		t.Fatalf("the older driver's first write: %v", err)
	}
	if err := newer.Write(ctx, []backend.Item{{Addr: "a", Value: []byte("new")}}); err != nil {
		t.Fatalf("the newer driver's write: %v", err)
	}
	if err := older.Write(ctx, []backend.Item{{Addr: "a", Value: []byte("late")}, {Addr: "b", Value: []byte("late")}}); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("the older driver's late Write: %v, want ErrFenced", err)
	}
	if deposed.Err() == nil {
		t.Fatalf("the older driver is not deposed after a refused write")
	}
	if _, err := backend.Pipeline(ctx, older, nil, [][]string{{"a"}}); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("the deposed driver's reading Pipeline: %v, want ErrFenced", err)
	}
	if _, err := older.Read(ctx, []string{"a"}); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("the deposed driver's Read: %v, want ErrFenced", err)
	}
	got, err := backend.Pipeline(ctx, newer, nil, [][]string{{"a", "b"}})
	if err != nil {
		t.Fatalf("the newer driver's reading Pipeline: %v", err)
	}
	if string(got[0][0]) != "new" || got[0][1] != nil {
		t.Fatalf("storage holds a=%q b=%q; want the newer driver's a=new and no b", got[0][0], got[0][1])
	}
}

// TestSuperseded: a driver that has not written since a newer one took
// over learns it from the fences' tokens, before it would call what it
// reads tampering; a driver still in office is told nothing.
func TestSuperseded(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	fences := []backend.Fence{{Key: "fence/a", Token: 3}, {Key: "fence/b", Token: 3}}
	for _, f := range fences {
		if err := store.WriteFenced(ctx, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	var d backend.Deposition
	if err := d.Superseded(ctx, store, fences...); err != nil || d.Err() != nil {
		t.Fatalf("Superseded of a driver in office = %v (deposed: %v), want nil", err, d.Err())
	}
	if err := store.WriteFenced(ctx, backend.Fence{Key: "fence/b", Token: 4}, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Superseded(ctx, store, fences...); !errors.Is(err, backend.ErrFenced) || !errors.Is(d.Err(), backend.ErrFenced) {
		t.Fatalf("Superseded after a newer driver claimed fence/b = %v (deposed: %v), want ErrFenced", err, d.Err())
	}
}
