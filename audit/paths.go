package audit

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/oblivkv/oblivkv/observe"
)

// PathRead is one path read of a tree ORAM as storage saw it: the leaf
// whose path the call read, and when the call ran.
type PathRead struct {
	Leaf       uint64
	Start, End time.Duration
}

// PathReadOf returns the PathRead of the Tap record r of a read of leaf.
func PathReadOf(r observe.Record, leaf uint64) PathRead {
	return PathRead{Leaf: leaf, Start: r.Start, End: r.Start + r.Took}
}

// SamePath checks that path reads coincide no more often than random
// leaves do. It counts the pairs of reads that were in flight together
// (their calls overlapped in time) or came one right after the other, and
// among them the pairs that read the same path. When every read's leaf is
// uniform over leaves and independent of the others', which is what a
// tree ORAM promises, each pair reads one path with probability 1/leaves
// and the indicators are pairwise independent, so the count is close to
// Poisson with mean pairs/leaves (Excess).
//
// It catches a repeated request that reads its block's real path again
// while the first read is in flight, and a block not moved to a fresh
// leaf after an access, whose next access reads the same path.
func SamePath(name string, reads []PathRead, leaves uint64) Check {
	rs := slices.Clone(reads)
	slices.SortStableFunc(rs, func(a, b PathRead) int { return cmp.Compare(a.Start, b.Start) })
	pairs, same := 0, 0
	for i := range rs {
		for j := i + 1; j < len(rs) && (j == i+1 || rs[j].Start < rs[i].End); j++ {
			pairs++
			if rs[j].Leaf == rs[i].Leaf {
				same++
			}
		}
	}
	return Excess(name, same, float64(pairs)/float64(leaves),
		fmt.Sprintf("%d of %d pairs of path reads in flight together or consecutive read one path (%d leaves)", same, pairs, leaves))
}

// TracedRead is one path read of a tree ORAM as its trusted side planned
// it (ground truth from a test hook): the leaf whose path it reads, the
// block it is for (by an opaque name, such as its block ID's bytes), and
// whether it is the block's real read (of the path the position map gives
// the block, or of a fresh random path for a block not stored) rather than
// a fake read of a random path.
type TracedRead struct {
	Leaf  uint64
	Block string
	Real  bool
}

// RealReadWalks follows every block through its real reads, for
// FollowKey: one walk per block, the leaves storage saw its real reads
// read, in the order they were planned. traced is every path read the
// trusted side planned, in order, and reads every path read storage saw.
// Each leaf's planned reads are matched in order to storage's reads of
// that leaf in the order they began (reads in flight together may be
// matched either way round: they read the same path). It also returns
// what the trace and storage's view disagree on: a leaf read other than
// as often as planned.
func RealReadWalks(traced []TracedRead, reads []PathRead) ([][]int, []string) {
	rs := slices.Clone(reads)
	slices.SortStableFunc(rs, func(a, b PathRead) int { return cmp.Compare(a.Start, b.Start) })
	seen := map[uint64][]PathRead{} // leaf -> storage's reads of it not matched yet
	for _, r := range rs {
		seen[r.Leaf] = append(seen[r.Leaf], r)
	}
	var walks [][]int
	walk := map[string]int{}    // block -> its walk
	missing := map[uint64]int{} // leaf -> planned reads storage did not see
	for _, t := range traced {
		if len(seen[t.Leaf]) == 0 {
			missing[t.Leaf]++
			continue
		}
		r := seen[t.Leaf][0]
		seen[t.Leaf] = seen[t.Leaf][1:]
		if !t.Real {
			continue
		}
		w, ok := walk[t.Block]
		if !ok {
			w = len(walks)
			walk[t.Block] = w
			walks = append(walks, nil)
		}
		walks[w] = append(walks[w], int(r.Leaf))
	}
	var violations []string
	for _, leaf := range slices.Sorted(maps.Keys(missing)) {
		violations = append(violations, fmt.Sprintf("leaf %d: %d planned reads that storage did not see", leaf, missing[leaf]))
	}
	for _, leaf := range slices.Sorted(maps.Keys(seen)) {
		if n := len(seen[leaf]); n > 0 {
			violations = append(violations, fmt.Sprintf("leaf %d: %d reads storage saw that were not planned", leaf, n))
		}
	}
	return walks, violations
}
