package audit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/observe"
)

// batchLog simulates a Waffle-like store of objects on storage under
// fresh ids: every batch reads b ids (the first real of them the most
// recently written ids, as real queries for hot objects would be, the
// rest the oldest) and writes b new ones. order arranges a batch's ids
// (real first) before the Read or the Write lists them.
func batchLog(batches, b, real int, order func(r *rand.Rand, ids []string)) []observe.Record {
	r := rand.New(rand.NewPCG(3, 4))
	var stored []string // oldest first
	next := 0
	var recs []observe.Record
	write := func() {
		ids := make([]string, b)
		for i := range ids {
			ids[i] = fmt.Sprintf("p/%d", next)
			next++
		}
		stored = append(stored, ids...)
		order(r, ids)
		recs = append(recs, observe.Record{Op: observe.OpWrite, Addrs: ids})
	}
	for range 10 {
		write()
	}
	for range batches {
		ids := slices.Clone(stored[len(stored)-real:]) // real: recent
		ids = append(ids, stored[:b-real]...)          // fake: oldest
		stored = slices.DeleteFunc(stored, func(s string) bool { return slices.Contains(ids, s) })
		order(r, ids)
		recs = append(recs, observe.Record{Op: observe.OpRead, Addrs: ids})
		write()
	}
	return recs
}

// PositionChecks pass a batch log whose calls list their addresses in a
// random order, and reject decisively one whose Reads list real queries
// first, and one whose Writes keep a fixed order that later Reads follow.
func TestPositionChecks(t *testing.T) {
	shuffle := func(r *rand.Rand, ids []string) {
		r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	}
	asIs := func(*rand.Rand, []string) {}
	clean := PositionChecks("shuffled", BatchLinks(batchLog(400, 40, 8, shuffle), "p/"), 4)
	for _, c := range clean {
		if !c.Pass() {
			t.Errorf("shuffled batches: %v", c)
		}
	}
	leaky := PositionChecks("real first", BatchLinks(batchLog(400, 40, 8, asIs), "p/"), 4)
	decisive := 0
	for _, c := range leaky {
		t.Log(c)
		if c.Decisive() {
			decisive++
		}
	}
	if decisive == 0 {
		t.Errorf("batches listing real queries first passed every position check")
	}
}

// BatchLinks relates each read to the write that put the address there:
// positions as shares of the calls' addresses, age in batch Reads.
func TestBatchLinks(t *testing.T) {
	recs := []observe.Record{
		{Op: observe.OpWrite, Addrs: []string{"p/a", "p/b"}},
		{Op: observe.OpRead, Addrs: []string{"x/other"}}, // not a batch call
		{Op: observe.OpRead, Addrs: []string{"p/b", "p/z"}},
		{Op: observe.OpWrite, Addrs: []string{"p/c", "p/d", "p/e", "p/b"}},
		{Op: observe.OpRead, Addrs: []string{"p/a", "p/b"}},
	}
	got := BatchLinks(recs, "p/")
	want := []Link{{ReadPos: 0, WritePos: 0.5, Age: 1}, {ReadPos: 0, WritePos: 0, Age: 2}, {ReadPos: 0.5, WritePos: 0.75, Age: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("BatchLinks = %+v, want %+v", got, want)
	}
}

// Ages fall in bins of equal counts; a value shared by many links stays
// in one bin, leaving fewer bins.
func TestQuantileBins(t *testing.T) {
	counts := func(links []Link) []int {
		bin := quantileBins(links, 4)
		c := make([]int, 4)
		for _, l := range links {
			c[bin(l.Age)]++
		}
		return c
	}
	var links []Link
	for a := range 100 {
		links = append(links, Link{Age: a})
	}
	if got := counts(links); !slices.Equal(got, []int{25, 25, 25, 25}) {
		t.Fatalf("ages 0..99 in bins %v; want 25 each", got)
	}
	for range 100 {
		links = append(links, Link{Age: 7})
	}
	// Sorted, the 200 ages hold 7 at ranks 7 to 107: the cuts at ranks 50
	// and 100 both fall on it, so 0-6, 7-49 and 50-99 are the bins.
	if got := counts(links); !slices.Equal(got, []int{7, 143, 50, 0}) {
		t.Fatalf("ages 0..99 and a hundred 7s in bins %v; want [7 143 50 0]", got)
	}
}

// OneBatchPerTick counts the batches between ticks exactly.
func TestOneBatchPerTick(t *testing.T) {
	batch := func(r observe.Record) bool { return r.Op == observe.OpRead }
	rd, wr := observe.Record{Op: observe.OpRead}, observe.Record{Op: observe.OpWrite}
	recs := []observe.Record{rd, wr, rd, wr, rd, wr}
	if c := OneBatchPerTick("ok", recs, batch, []int{0, 2, 4}); !c.Pass() {
		t.Fatalf("one batch per tick: %v", c)
	}
	if c := OneBatchPerTick("skipped", recs, batch, []int{0, 2, 2, 4}); c.Pass() {
		t.Fatalf("a tick without a batch passed: %v", c)
	}
	if c := OneBatchPerTick("early", recs, batch, []int{0, 4}); c.Pass() {
		t.Fatalf("two batches in one tick passed: %v", c)
	}
}
