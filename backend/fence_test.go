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
// older's Write and writing Pipeline are refused whole, its reading
// Pipeline still reads, and storage holds the newer's data.
func TestWithFenceFencesEveryWrite(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	driver := func(token uint64) backend.Backend {
		return backend.WithFence(store, func() backend.Fence { return backend.Fence{Key: "fence/m", Token: token} })
	}
	older, newer := driver(1), driver(2)
	if err := older.Write(ctx, []backend.Item{{Addr: "a", Value: []byte("old")}}); err != nil {
		t.Fatalf("the older driver's first write: %v", err)
	}
	if err := newer.Write(ctx, []backend.Item{{Addr: "a", Value: []byte("new")}}); err != nil {
		t.Fatalf("the newer driver's write: %v", err)
	}
	if err := older.Write(ctx, []backend.Item{{Addr: "a", Value: []byte("late")}, {Addr: "b", Value: []byte("late")}}); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("the older driver's late Write: %v, want ErrFenced", err)
	}
	if _, err := backend.Pipeline(ctx, older, []backend.Item{{Addr: "a", Value: []byte("late")}}, [][]string{{"a"}}); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("the older driver's late writing Pipeline: %v, want ErrFenced", err)
	}
	got, err := backend.Pipeline(ctx, older, nil, [][]string{{"a", "b"}})
	if err != nil {
		t.Fatalf("the older driver's reading Pipeline: %v", err)
	}
	if string(got[0][0]) != "new" || got[0][1] != nil {
		t.Fatalf("storage holds a=%q b=%q; want the newer driver's a=new and no b", got[0][0], got[0][1])
	}
}
