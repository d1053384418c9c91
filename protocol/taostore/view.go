package taostore

import (
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// View is storage's view of a TaoStore tree (TaoStore Sec. IV),
// parsed from the Tap alone: its path reads and write-backs, and what is
// wrong with the calls' shape.
type View struct {
	Reads      []audit.PathRead
	WriteBacks []WriteBack
	Shape      []string // calls that are neither a read of the stored levels of one path nor a write of buckets, or buckets of another size
	WBShape    []string // write-backs that are not whole stored paths
}

// ParseView parses the path reads and write-backs of records, the
// calls of a TaoStore tree of shape geo whose top cached levels stay in
// the proxy's memory (Options.CachedLevels, public). records must hold
// no other calls (a journaled store's anchor writes are not its tree's).
func ParseView(records []observe.Record, geo tree.Geometry, cached int) View {
	var v View
	size := -1 // every bucket's size, read or written
	for _, r := range records {
		buckets, problems := taoCallBuckets(r, &size)
		switch {
		case r.Err:
			problems = append(problems, "failed")
		case r.Op == observe.OpRead:
			if leaf, ok := storedPathLeaf(geo, cached, buckets); ok {
				v.Reads = append(v.Reads, audit.PathReadOf(r, leaf))
			} else {
				problems = append(problems, fmt.Sprintf("buckets %v are not the stored levels of one path", buckets))
			}
		case r.Op == observe.OpWrite:
			leaves, problem := writeBackLeaves(geo, cached, buckets)
			if problem != "" {
				v.WBShape = append(v.WBShape, fmt.Sprintf("call %d: %s", r.Seq, problem))
			}
			v.WriteBacks = append(v.WriteBacks, WriteBack{Leaves: leaves, Start: r.Start})
		default:
			problems = append(problems, "neither a path read nor a write-back")
		}
		for _, pr := range problems {
			v.Shape = append(v.Shape, fmt.Sprintf("call %d (%v): %s", r.Seq, r.Op, pr))
		}
	}
	return v
}

// taoCallBuckets returns the buckets call r names, and what is wrong
// with it: an address that is not a bucket, or a bucket of other than
// *size bytes (the first size seen, if *size < 0, becomes *size).
func taoCallBuckets(r observe.Record, size *int) ([]uint64, []string) {
	layout := tree.Layout{Prefix: BucketPrefix}
	var problems []string
	buckets := make([]uint64, len(r.Addrs))
	for i, a := range r.Addrs {
		b, ok := layout.Bucket(a)
		if !ok {
			problems = append(problems, fmt.Sprintf("address %q is not a bucket", a))
		}
		buckets[i] = b
	}
	for _, n := range r.Sizes {
		if *size < 0 {
			*size = n
		}
		if n != *size {
			problems = append(problems, fmt.Sprintf("a bucket of %d bytes, others have %d", n, *size))
			break
		}
	}
	return buckets, problems
}

// storedPathLeaf returns the leaf whose path's levels from cached down
// are buckets, in order.
func storedPathLeaf(geo tree.Geometry, cached int, buckets []uint64) (uint64, bool) {
	if len(buckets) != geo.L+1-cached {
		return 0, false
	}
	leaf, ok := geo.LeafOf(buckets[len(buckets)-1])
	for i, b := range buckets {
		if !ok || b != geo.BucketAt(leaf, cached+i) {
			return 0, false
		}
	}
	return leaf, true
}

// writeBackLeaves returns the leaves among the buckets of a write-back,
// and what is wrong with it unless its buckets are, in ascending order,
// exactly the stored buckets (levels cached and down) of those leaves'
// paths: what TaORAM writes back (TaoStore Sec. IV-B step 3).
func writeBackLeaves(geo tree.Geometry, cached int, buckets []uint64) ([]uint64, string) {
	var leaves []uint64
	for _, b := range buckets {
		if leaf, ok := geo.LeafOf(b); ok {
			leaves = append(leaves, leaf)
		}
	}
	want := slices.DeleteFunc(geo.Union(leaves, nil), func(b uint64) bool { return geo.Level(b) < cached })
	if slices.Equal(buckets, want) {
		return leaves, ""
	}
	missing, extra := len(want), 0
	for _, b := range buckets {
		if _, found := slices.BinarySearch(want, b); found {
			missing--
		} else {
			extra++
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(leaves))), fmt.Sprintf(
		"%d buckets for %d paths, which have %d stored buckets: %d of them missing, %d others, or out of order",
		len(buckets), len(leaves), len(want), missing, extra)
}
