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
	want := map[string]entry{}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 200_000 {
		addr := fmt.Sprintf("%0*d", 1+r.IntN(5), r.IntN(300))
		switch r.IntN(3) {
		case 0:
			x.del(addr)
			delete(want, addr)
		default:
			e := entry{cur: value{at: loc{class: 1, slot: uint32(i), stamp: r.Uint64()}}, epoch: uint64(i)}
			if r.IntN(4) == 0 {
				e = entry{cur: value{inline: []byte(addr)}, base: value{at: loc{class: 2, slot: 7}}}
			}
			x.put(addr, e)
			want[addr] = e
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

func checkIndex(t *testing.T, x *index, want map[string]entry) {
	t.Helper()
	got := map[string]entry{}
	x.each(func(addr string, e entry) { got[addr] = e })
	if !maps.EqualFunc(got, want, sameEntry) || x.count != len(want) {
		t.Fatalf("the index holds %d addresses (count %d), want %d, or an entry differs", len(got), x.count, len(want))
	}
	for addr, e := range want {
		if g, ok := x.get(addr); !ok || !sameEntry(g, e) {
			t.Fatalf("get(%q) = %+v, %v; want %+v", addr, g, ok, e)
		}
	}
	if _, ok := x.get("absent"); ok {
		t.Fatal("an address never put is found")
	}
}

func sameEntry(a, b entry) bool {
	return a.cur.at == b.cur.at && a.base.at == b.base.at && a.epoch == b.epoch &&
		string(a.cur.inline) == string(b.cur.inline) && (a.cur.inline == nil) == (b.cur.inline == nil) &&
		(a.base.inline == nil) == (b.base.inline == nil)
}
