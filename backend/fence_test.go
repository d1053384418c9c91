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
