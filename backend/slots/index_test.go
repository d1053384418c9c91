package slots

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// The index against a map, with a hash that puts many addresses in one
// chain, so chains are built, walked and unlinked at every position, and
// the keys compacted now and then.
func TestIndexAgainstAMap(t *testing.T) {
	x := newIndex()
	x.hash = func(addr string) uint64 { return uint64(len(addr) % 3) }
	want := map[string]value{}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 200_000 {
		addr := fmt.Sprintf("%0*d", 1+r.IntN(5), r.IntN(300))
		switch r.IntN(3) {
		case 0:
			x.del(addr)
			delete(want, addr)
		default:
			v := value{at: loc{class: 1, slot: uint32(i), stamp: r.Uint64()}}
			if r.IntN(4) == 0 {
				v = value{inline: []byte(addr)}
			}
			x.put(addr, v)
			want[addr] = v
		}
		if i%997 == 0 {
			checkIndex(t, x, want)
		}
		if i%5003 == 0 {
			x.compactKeys()
			if x.garbage != 0 {
				t.Fatalf("%d bytes of garbage after compacting", x.garbage)
			}
		}
	}
	checkIndex(t, x, want)
}

func checkIndex(t *testing.T, x *index, want map[string]value) {
	t.Helper()
	got := map[string]value{}
	x.each(func(addr string, v value) { got[addr] = v })
	if !maps.EqualFunc(got, want, sameValue) || x.count != len(want) {
		t.Fatalf("the index holds %d addresses (count %d), want %d, or an entry differs", len(got), x.count, len(want))
	}
	for addr, v := range want {
		if g, ok := x.get(addr); !ok || !sameValue(g, v) {
			t.Fatalf("get(%q) = %+v, %v; want %+v", addr, g, ok, v)
		}
	}
	if _, ok := x.get("absent"); ok {
		t.Fatal("an address never put is found")
	}
}

func sameValue(a, b value) bool {
	return a.at == b.at && string(a.inline) == string(b.inline) && (a.inline == nil) == (b.inline == nil)
}
