package tree

import (
	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/kv"
)

// followBins is the number of bins of each side of the table of
// consecutive positions that HotKeyWalk tests (audit.FollowKey).
const followBins = 8

// LeafBins counts the leaves of reads in bins equal-width bins of g's
// leaves.
func LeafBins(reads []audit.PathRead, g Geometry, bins int) []int {
	leaves := make([]uint64, len(reads))
	for i, p := range reads {
		leaves[i] = p.Leaf
	}
	return audit.Bin(leaves, g.Leaves(), bins)
}

// HotKeyWalk follows the hot key across its accesses (audit.FollowKey) on
// an audit's hotkey run of a tree ORAM of geometry g, whose path reads
// storage saw are reads: every path read is the hot key's real read or a
// fake read of a random leaf, each leaf fresh and independent of what
// storage saw before, so the leaves in the order storage saw them are
// one walk that must look like independent uniform draws. A leaf a block
// moves to that follows from the one it left fails "same successor
// again". Other workloads have no one key to follow from storage's view,
// and get no check.
func HotKeyWalk(r auditspec.Run, reads []audit.PathRead, g Geometry) []audit.Check {
	if r.Workload != "hotkey" {
		return nil
	}
	walk := make([]int, len(reads))
	for i, p := range reads {
		walk[i] = int(p.Leaf)
	}
	return audit.FollowKey(r.Workload, [][]int{walk}, int(g.Leaves()), followBins)
}

// LeafPlot titles the histogram of the leaves read, in bins, that the
// audit of a tree ORAM plots.
var LeafPlot = auditspec.Plot{Title: "Leaves read (leaf bins)", YLabel: "path reads"}

// RunGeometry returns the geometry of the tree of an audited run's store,
// whose levels it reports (the tree_levels statistic).
func RunGeometry(r auditspec.Run) (Geometry, error) {
	levels, err := r.Stat(kv.StatTreeLevels)
	return Geometry{L: int(levels) - 1}, err
}
