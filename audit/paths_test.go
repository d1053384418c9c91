package audit

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// concurrentReads returns n path reads of a tree of leaves leaves, eight
// in flight at a time; leaf(i) chooses read i's leaf.
func concurrentReads(n int, leaf func(i int) uint64) []PathRead {
	reads := make([]PathRead, n)
	for i := range reads {
		start := time.Duration(i) * time.Millisecond
		reads[i] = PathRead{Leaf: leaf(i), Start: start, End: start + 8*time.Millisecond}
	}
	return reads
}

// SamePath passes independent uniform leaves and rejects, decisively,
// reads in flight together that share a path (a repeated request reading
// its real path) and a path read again by the next read (a block not
// remapped).
func TestSamePath(t *testing.T) {
	const leaves, n = 1024, 4000
	r := rand.New(rand.NewPCG(1, 1))
	random := concurrentReads(n, func(int) uint64 { return r.Uint64N(leaves) })
	c := SamePath("random", random, leaves)
	if !c.Pass() {
		t.Fatalf("independent uniform leaves: %v", c)
	}
	t.Log(c)
	// Every fourth read is a repeat of the read before it.
	repeats := concurrentReads(n, func(int) uint64 { return r.Uint64N(leaves) })
	for i := 3; i < n; i += 4 {
		repeats[i].Leaf = repeats[i-1].Leaf
	}
	// Sequential reads, every other one reading the path before it again.
	sequential := make([]PathRead, n)
	for i := range sequential {
		leaf := r.Uint64N(leaves)
		if i%2 == 1 {
			leaf = sequential[i-1].Leaf
		}
		sequential[i] = PathRead{Leaf: leaf, Start: time.Duration(2*i) * time.Millisecond, End: time.Duration(2*i+1) * time.Millisecond}
	}
	for name, reads := range map[string][]PathRead{"in flight": repeats, "consecutive": sequential} {
		if c := SamePath(name, reads, leaves); !c.Decisive() {
			t.Errorf("%s: %v; want a decisive failure", name, c)
		} else {
			t.Log(c)
		}
	}
}

// RealReadWalks follows each block through its real reads, leaving out
// fake reads, matches reads in flight together by leaf whatever order they
// began in, and reports a planned read storage did not see and a read it
// saw that was not planned.
func TestRealReadWalks(t *testing.T) {
	a, b := "block a", "block b"
	traced := []TracedRead{{5, a, true}, {7, b, true}, {9, a, false}, {6, a, true}, {5, b, true}}
	// Storage began the reads of leaves 7 and 9 before that of leaf 5.
	reads := concurrentReads(5, func(i int) uint64 { return [...]uint64{7, 9, 5, 6, 5}[i] })
	walks, violations := RealReadWalks(traced, reads)
	if want := [][]int{{5, 6}, {7, 5}}; !reflect.DeepEqual(walks, want) || len(violations) > 0 {
		t.Errorf("walks %v, violations %q; want %v and none", walks, violations, want)
	}
	reads[3].Leaf = 8 // storage saw leaf 8 read where leaf 6 was planned
	_, violations = RealReadWalks(traced, reads)
	if len(violations) != 2 {
		t.Errorf("a read of another leaf than planned: violations %q; want one for each leaf", violations)
	}
}
