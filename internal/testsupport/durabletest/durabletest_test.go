package durabletest

import (
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
)

// TestWitnessCountsNovelWrites: a Write redone while recovering, the same
// items in the same order, is not novel; one that differs in a value, an
// address, the order of its items or where an address ends and its value
// begins is, and so is every Write it took before recovering only once.
func TestWitnessCountsNovelWrites(t *testing.T) {
	w := NewWitness(mem.New())
	taken := []backend.Item{{Addr: "a", Value: []byte("bc")}, {Addr: "d", Value: []byte("e")}}
	if err := w.Write(t.Context(), taken); err != nil {
		t.Fatal(err)
	}
	w.Recovering(true)
	if err := w.Write(t.Context(), taken); err != nil || w.Novel() != 0 {
		t.Fatalf("the same Write redone: %v, %d novel; want none", err, w.Novel())
	}
	for i, items := range [][]backend.Item{
		{{Addr: "a", Value: []byte("bx")}, {Addr: "d", Value: []byte("e")}},
		{{Addr: "a", Value: []byte("bc")}, {Addr: "x", Value: []byte("e")}},
		{{Addr: "d", Value: []byte("e")}, {Addr: "a", Value: []byte("bc")}},
		{{Addr: "ab", Value: []byte("c")}, {Addr: "d", Value: []byte("e")}},
		{{Addr: "a", Value: []byte("bc")}},
	} {
		if err := w.Write(t.Context(), items); err != nil {
			t.Fatal(err)
		}
		if got := w.Novel(); got != int64(i+1) {
			t.Fatalf("Write %d (%v) while recovering: %d novel; want %d", i, items, got, i+1)
		}
	}
}
