package slots

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// The index against a map, with a hash that puts many addresses in one
// chain, so chains are built and walked at every position.
func TestIndexAgainstAMap(t *testing.T) {
	x := newIndex()
	x.hash = func(addr string) uint64 { return uint64(len(addr) % 3) }
	want := map[string]entry{}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 100_000 {
		addr := fmt.Sprintf("%0*d", 1+r.IntN(5), r.IntN(300))
		e := entry{at: loc{class: 1, slot: uint32(i), gen: r.Uint64()}, tomb: r.IntN(4) == 0}
		old, had := x.put(addr, e)
		if prev, ok := want[addr]; ok != had || old != prev {
			t.Fatalf("put(%q) replaced %+v (%v), want %+v (%v)", addr, old, had, prev, ok)
		}
		want[addr] = e
		if i%997 == 0 {
			checkIndex(t, x, want)
		}
	}
	checkIndex(t, x, want)
}

func checkIndex(t *testing.T, x *index, want map[string]entry) {
	t.Helper()
	got := map[string]entry{}
	x.each(func(addr []byte, e entry) { got[string(addr)] = e })
	if !maps.Equal(got, want) {
		t.Fatalf("the index holds %d addresses, want %d, or an entry differs", len(got), len(want))
	}
	for addr, e := range want {
		if g, ok := x.get(addr); !ok || g != e {
			t.Fatalf("get(%q) = %+v, %v; want %+v", addr, g, ok, e)
		}
	}
	if _, ok := x.get("absent"); ok {
		t.Fatal("an address never put is found")
	}
}
