package sealedstate

import (
	"errors"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/seal"
)

type sample struct {
	N int
	M map[string][]byte
}

func keys(t *testing.T, b byte) *seal.Keys {
	var m [32]byte
	m[0] = b
	k, err := seal.NewKeys(m[:])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A saved state comes back until deleted; a tampered or foreign one is
// refused.
func TestSaveTake(t *testing.T) {
	ctx, b, k := t.Context(), mem.New(), keys(t, 1)
	in := sample{N: 7, M: map[string][]byte{"a": []byte("x")}}
	if err := Save(ctx, b, k, "st", in); err != nil {
		t.Fatal(err)
	}
	var out sample
	if ok, err := Load(ctx, b, k, "st", &out); !ok || err != nil || out.N != 7 || string(out.M["a"]) != "x" {
		t.Fatalf("Load = %v, %v, %+v; want the saved state", ok, err, out)
	}
	if err := Delete(ctx, b, "st"); err != nil {
		t.Fatal(err)
	}
	if ok, err := Load(ctx, b, k, "st", &out); ok || err != nil {
		t.Fatalf("Load after Delete = %v, %v; want nothing", ok, err)
	}
	if err := Save(ctx, b, k, "st", in); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, b, keys(t, 2), "st", &out); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("Load with another key: %v; want seal.ErrTampered", err)
	}
	vals, _ := b.Read(ctx, []string{"st"})
	if err := b.Write(ctx, []backend.Item{{Addr: "other", Value: vals[0]}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, b, k, "other", &out); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("Load of a state moved to another address: %v; want seal.ErrTampered", err)
	}
	// Sealed under the right key and address, but not a sample.
	if err := Save(ctx, b, k, "st", "not a sample"); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, b, k, "st", &out); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("Load of a state that does not decode: %v; want seal.ErrTampered", err)
	}
}

// Require refuses a store without a saved state as ErrUnclean.
func TestRequire(t *testing.T) {
	ctx, b, k := t.Context(), mem.New(), keys(t, 1)
	var out sample
	if err := Require(ctx, b, k, "st", &out); !errors.Is(err, ErrUnclean) {
		t.Fatalf("Require with nothing saved: %v; want ErrUnclean", err)
	}
	if err := Save(ctx, b, k, "st", sample{N: 3}); err != nil {
		t.Fatal(err)
	}
	if err := Require(ctx, b, k, "st", &out); err != nil || out.N != 3 {
		t.Fatalf("Require = %v, %+v; want the saved state", err, out)
	}
}
