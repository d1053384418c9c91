package pathoram

import (
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// pathAccesses parses the log of a sequential Path ORAM (TaoStore Sec.
// IV-A, this package) whose buckets are addresses of layout: it
// returns the path read of every Read of a whole root-to-leaf path, and
// the violations of the access shape: a Read of a path, then a Write of
// the same addresses, every bucket of bucketSize bytes. Checkpoints'
// anchor writes are left out.
func pathAccesses(g tree.Geometry, layout tree.Layout, bucketSize int, recs []observe.Record) ([]audit.PathRead, []string) {
	var reads []audit.PathRead
	var violations []string
	bad := func(r observe.Record, format string, args ...any) {
		violations = append(violations, fmt.Sprintf("call %d (%v): ", r.Seq, r.Op)+fmt.Sprintf(format, args...))
	}
	for i, r := range recs {
		if durable.IsAnchorWrite(r) {
			continue
		}
		if r.Op != observe.OpRead {
			if i == 0 || recs[i-1].Op != observe.OpRead {
				bad(r, "not the write-back of a path read")
			}
			continue
		}
		leaf, ok := pathLeaf(g, layout, r.Addrs)
		if !ok {
			bad(r, "addresses %q are not the root-to-leaf path of one leaf", r.Addrs)
			continue
		}
		reads = append(reads, audit.PathReadOf(r, leaf))
		switch {
		case i+1 == len(recs) || recs[i+1].Op != observe.OpWrite:
			bad(r, "a path read without its write-back")
		case !slices.Equal(recs[i+1].Addrs, r.Addrs):
			bad(recs[i+1], "wrote %d addresses after reading the %d of a path", len(recs[i+1].Addrs), len(r.Addrs))
		}
		for j := range r.Sizes {
			if r.Sizes[j] != bucketSize || i+1 < len(recs) && j < len(recs[i+1].Sizes) && recs[i+1].Sizes[j] != bucketSize {
				bad(r, "a bucket of other than %d bytes", bucketSize)
				break
			}
		}
	}
	return reads, violations
}

// pathLeaf returns the leaf whose root-to-leaf path addrs are.
func pathLeaf(g tree.Geometry, layout tree.Layout, addrs []string) (uint64, bool) {
	if len(addrs) != g.L+1 {
		return 0, false
	}
	last, _ := layout.Bucket(addrs[g.L])
	leaf, ok := g.LeafOf(last)
	for lvl, a := range addrs {
		b, isBucket := layout.Bucket(a)
		if !ok || !isBucket || b != g.BucketAt(leaf, lvl) {
			return 0, false
		}
	}
	return leaf, true
}
