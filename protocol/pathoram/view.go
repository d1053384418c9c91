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
// the same addresses, every bucket of bucketSize bytes. The next access
// may read before that Write (remote.writePath), so the Write of a path
// comes after its Read, and after at most one more Read. Checkpoints'
// anchor writes are left out.
func pathAccesses(g tree.Geometry, layout tree.Layout, bucketSize int, recs []observe.Record) ([]audit.PathRead, []string) {
	var reads []audit.PathRead
	var violations []string
	bad := func(r observe.Record, format string, args ...any) {
		violations = append(violations, fmt.Sprintf("call %d (%v): ", r.Seq, r.Op)+fmt.Sprintf(format, args...))
	}
	sized := func(r observe.Record) {
		if slices.ContainsFunc(r.Sizes, func(n int) bool { return n != bucketSize }) {
			bad(r, "a bucket of other than %d bytes", bucketSize)
		}
	}
	var unwritten []observe.Record // path reads whose write-backs are to come, oldest first
	for _, r := range recs {
		if durable.IsAnchorWrite(r) {
			continue
		}
		sized(r)
		if r.Op != observe.OpRead {
			switch {
			case len(unwritten) == 0:
				bad(r, "not the write-back of a path read")
			case !slices.Equal(r.Addrs, unwritten[0].Addrs):
				bad(r, "wrote %d addresses after reading the %d of a path", len(r.Addrs), len(unwritten[0].Addrs))
			}
			if len(unwritten) > 0 {
				unwritten = unwritten[1:]
			}
			continue
		}
		leaf, ok := pathLeaf(g, layout, r.Addrs)
		if !ok {
			bad(r, "addresses %q are not the root-to-leaf path of one leaf", r.Addrs)
			continue
		}
		reads = append(reads, audit.PathReadOf(r, leaf))
		if len(unwritten) == 2 {
			bad(unwritten[0], "a path read without its write-back")
			unwritten = unwritten[1:]
		}
		unwritten = append(unwritten, r)
	}
	for _, r := range unwritten {
		bad(r, "a path read without its write-back")
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
