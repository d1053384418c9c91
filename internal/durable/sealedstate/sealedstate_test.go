package sealedstate

import (
	"bytes"
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
	if err := Require(ctx, b, k, "st", &out); err != nil || out.N != 7 || string(out.M["a"]) != "x" {
		t.Fatalf("Require = %v, %+v; want the saved state", err, out)
	}
	if err := Delete(ctx, b, k, "st"); err != nil {
		t.Fatal(err)
	}
	if err := Require(ctx, b, k, "st", &out); !errors.Is(err, ErrUnclean) {
		t.Fatalf("Require after Delete = %v; want nothing saved (ErrUnclean)", err)
	}
	if b.Len() != 0 {
		t.Fatalf("%d addresses left after Delete", b.Len())
	}
	if err := Save(ctx, b, k, "st", in); err != nil {
		t.Fatal(err)
	}
	if err := Require(ctx, b, keys(t, 2), "st", &out); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("Require with another key: %v; want seal.ErrTampered", err)
	}
	vals, _ := b.Read(ctx, []string{"st"})
	if err := b.Write(ctx, []backend.Item{{Addr: "other", Value: vals[0]}}); err != nil {
		t.Fatal(err)
	}
	if err := Require(ctx, b, k, "other", &out); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("Require of a state moved to another address: %v; want seal.ErrTampered", err)
	}
	// Sealed under the right key and address, but not a sample.
	if err := Save(ctx, b, k, "st", "not a sample"); err != nil {
		t.Fatal(err)
	}
	if err := Require(ctx, b, k, "st", &out); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("Require of a state that does not decode: %v; want seal.ErrTampered", err)
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

// A state larger than a chunk is saved in several chunks, comes back
// whole, and is refused when a chunk is missing or comes from another
// save; Delete removes every chunk.
func TestChunks(t *testing.T) {
	ctx, b, k := t.Context(), mem.New(), keys(t, 1)
	plain := bytes.Repeat([]byte("0123456789"), 1000)
	if err := SaveBytes(ctx, b, k, "st", plain, 1024); err != nil {
		t.Fatal(err)
	}
	if n := b.Len(); n != 1+10 {
		t.Fatalf("10,000 bytes in 1 KiB chunks stored at %d addresses, want a header and 10 chunks", n)
	}
	got, err := LoadBytes(ctx, b, k, "st")
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("LoadBytes = %d bytes, %v; want the 10,000 saved", len(got), err)
	}
	old, _ := b.Read(ctx, []string{"st/3"})
	plain[3*1024+5] = 'x' // the new save's chunk 3 differs
	if err := SaveBytes(ctx, b, k, "st", plain, 1024); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(ctx, []backend.Item{{Addr: "st/3", Value: old[0]}}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadBytes(ctx, b, k, "st"); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("LoadBytes with a chunk of an older save: %v; want seal.ErrTampered", err)
	}
	if err := b.Delete(ctx, []string{"st/5"}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadBytes(ctx, b, k, "st"); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("LoadBytes with a chunk missing: %v; want seal.ErrTampered", err)
	}
	if err := Delete(ctx, b, k, "st"); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Fatalf("%d addresses left after Delete", b.Len())
	}
}
