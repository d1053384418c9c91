package tree

import (
	"math/bits"
	"slices"
)

// Geometry is a complete binary tree of buckets with levels 0..L: the root
// at level 0, 2^L leaves at level L. Buckets are numbered in heap order
// (root 0, children of i are 2i+1 and 2i+2); leaves are numbered 0..2^L-1
// from left to right, and a leaf names the path from the root to it.
type Geometry struct{ L int }

// MaxLevels bounds L so that bucket numbers fit in a uint64 with room to
// spare.
const MaxLevels = 48

// NewGeometry returns the smallest tree with at least capacity leaves, as
// in the paper (TaoStore Sec. IV-A: "a complete binary tree with at least N
// leaves"), and at least two leaves (L >= 1).
func NewGeometry(capacity int) Geometry {
	l := 1
	for l < MaxLevels && uint64(1)<<l < uint64(max(capacity, 1)) {
		l++
	}
	return Geometry{L: l}
}

// Leaves returns the number of leaves, 2^L.
func (g Geometry) Leaves() uint64 { return 1 << g.L }

// Buckets returns the number of buckets, 2^(L+1)-1.
func (g Geometry) Buckets() uint64 { return 1<<(g.L+1) - 1 }

// Level returns the level of a bucket (0 for the root).
func (g Geometry) Level(bucket uint64) int { return bits.Len64(bucket+1) - 1 }

// BucketAt returns the bucket at level on the path to leaf.
func (g Geometry) BucketAt(leaf uint64, level int) uint64 {
	return 1<<level - 1 + leaf>>(g.L-level)
}

// Path appends to dst[:0] the buckets on the path to leaf, root first, and
// returns it (L+1 buckets).
func (g Geometry) Path(leaf uint64, dst []uint64) []uint64 {
	dst = dst[:0]
	for level := 0; level <= g.L; level++ {
		dst = append(dst, g.BucketAt(leaf, level))
	}
	return dst
}

// DeepestCommonLevel returns the deepest level at which the paths to leafA
// and leafB share a bucket: L when the leaves are equal, 0 when only the
// root is shared. Both leaves must be in the tree (below Leaves()).
func (g Geometry) DeepestCommonLevel(leafA, leafB uint64) int {
	return g.L - bits.Len64(leafA^leafB)
}

// OnPath reports whether bucket lies on the path to leaf.
func (g Geometry) OnPath(bucket, leaf uint64) bool {
	if bucket >= g.Buckets() || leaf >= g.Leaves() {
		return false
	}
	return g.BucketAt(leaf, g.Level(bucket)) == bucket
}

// LeafOf returns the leaf whose path ends at bucket, and false when bucket
// is not a leaf bucket.
func (g Geometry) LeafOf(bucket uint64) (uint64, bool) {
	first := g.Leaves() - 1
	if bucket < first || bucket >= g.Buckets() {
		return 0, false
	}
	return bucket - first, true
}

// ReverseLexLeaf returns the i-th eviction path in reverse-lexicographic
// order: the bit reversal of i mod 2^L over L bits. Consecutive paths share
// as few buckets as possible, and every leaf appears once per 2^L
// consecutive i (Ring ORAM's eviction order).
func (g Geometry) ReverseLexLeaf(i uint64) uint64 {
	return bits.Reverse64(i&(g.Leaves()-1)) >> (64 - g.L)
}

// Union appends to dst[:0] every bucket on the paths to leaves, each once,
// ordered by level (root first) and within a level from left to right, and
// returns it. This is the set of buckets a multi-path read fetches
// (Treebeard Sec. 5.3.1) and a multi-path eviction rewrites (Sec. 5.3.2).
// leaves is not modified.
func (g Geometry) Union(leaves []uint64, dst []uint64) []uint64 {
	sorted := slices.Clone(leaves)
	slices.Sort(sorted)
	dst = dst[:0]
	for level := 0; level <= g.L; level++ {
		start := len(dst)
		for _, leaf := range sorted {
			// Sorted leaves give non-decreasing buckets at every level, so
			// a duplicate is always the last bucket appended.
			if b := g.BucketAt(leaf, level); len(dst) == start || dst[len(dst)-1] != b {
				dst = append(dst, b)
			}
		}
	}
	return dst
}
