package taostore

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/audit"
)

// taoSchedule simulates TaORAM's write-back rule over n path reads of
// random leaves of a tree of leaves leaves, eight in flight at a time:
// the reads are flushed in an order that may differ from the order they
// returned in (neighbours swapped at random, as when two returning reads
// race for the proxy's lock), and every k flushed paths are written back
// a little later, sometimes after the next group's write-back has begun.
func taoSchedule(r *rand.Rand, n, k int, leaves uint64) ([]audit.PathRead, []WriteBack) {
	reads := make([]audit.PathRead, n)
	for i := range reads {
		start := time.Duration(i) * time.Millisecond
		reads[i] = audit.PathRead{Leaf: r.Uint64N(leaves), Start: start, End: start + 8*time.Millisecond}
	}
	order := make([]int, n) // flush order
	for i := range order {
		order[i] = i
	}
	for i := 0; i+1 < n; i++ {
		if r.IntN(3) == 0 {
			order[i], order[i+1] = order[i+1], order[i]
		}
	}
	var wbs []WriteBack
	for g := 0; (g+1)*k <= n; g++ {
		var last time.Duration
		var ls []uint64
		for _, i := range order[g*k : (g+1)*k] {
			last = max(last, reads[i].End)
			ls = append(ls, reads[i].Leaf)
		}
		slices.Sort(ls)
		delay := time.Duration(r.IntN(3*k)) * time.Millisecond
		wbs = append(wbs, WriteBack{Leaves: slices.Compact(ls), Start: last + delay})
	}
	return reads, wbs
}

// WriteBackSchedule passes TaORAM's schedule under concurrency, and fails
// a write-back started by a request, one that writes only some of the
// paths read, and one that begins before its k-th read returned.
func TestWriteBackSchedule(t *testing.T) {
	const n, k, leaves = 4000, 40, 1024
	r := rand.New(rand.NewPCG(3, 3))
	reads, wbs := taoSchedule(r, n, k, leaves)
	if c := WriteBackSchedule("as specified", reads, wbs, k); !c.Pass() {
		t.Fatalf("TaORAM's schedule: %v", c)
	} else {
		t.Log(c)
	}
	early := slices.Clone(wbs)
	early[7].Start = reads[8*k-2].Start // before the group's last reads returned
	extra := append(slices.Clone(wbs), WriteBack{Leaves: []uint64{reads[5].Leaf}, Start: reads[5].End})
	partial := slices.Clone(wbs)
	partial[3].Leaves = partial[3].Leaves[1:] // a path read but not written back
	for name, w := range map[string][]WriteBack{"early": early, "extra": extra, "partial": partial} {
		if c := WriteBackSchedule(name, reads, w, k); c.Pass() {
			t.Errorf("%s: %v; want a failure", name, c)
		} else {
			t.Log(c)
		}
	}
}
