package audit

import (
	"cmp"
	"fmt"
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
