package ringoram

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// topCache holds the buckets of a tree's top levels in trusted memory
// instead of on storage, as TaoStore keeps the top levels of its tree at
// the proxy (TaoStore Sec. V-A): every path crosses them, so they cost the
// most slot reads and rewrites per block they hold. A top bucket keeps at
// most Z real blocks and no dummies: nothing about it is visible, so it
// needs no slots, metadata, counts or reshuffles. Operations read and
// rewrite the buckets of their union below the top exactly as before;
// which ones depends only on the leaves, so storage sees the same calls
// minus the top levels' addresses.
//
// Buckets are numbered level by level from the root, so the top buckets
// are 0..2^levels-2 and the top of a sorted union is its prefix.
type topCache struct {
	levels int
	blocks [][]Block // by bucket: the real blocks it holds
}

// newTopCache returns the top of a tree of height l with levels of it in
// trusted memory, never the leaves' level, so every path read still
// reads storage.
func newTopCache(levels, l int) topCache {
	levels = max(0, min(levels, l))
	return topCache{levels: levels, blocks: make([][]Block, 1<<levels-1)}
}

// holds reports whether bucket is a top bucket.
func (c *topCache) holds(bucket uint64) bool { return bucket < uint64(len(c.blocks)) }

// split returns the top buckets of union (sorted ascending) and the rest.
func (c *topCache) split(union []uint64) (top, stored []uint64) {
	n, _ := slices.BinarySearch(union, uint64(len(c.blocks)))
	return union[:n], union[n:]
}

// TopBucket is the content of a top bucket after an operation: the real
// blocks it holds, in trusted memory.
type TopBucket struct {
	Bucket uint64
	Blocks []Block
}

// findTop returns the top bucket on the path to leaf holding block id,
// and false when none does.
func (t *Tree) findTop(leaf uint64, id tree.BlockID) (uint64, bool) {
	for lvl := range t.top.levels {
		if b := t.g.BucketAt(leaf, lvl); slices.ContainsFunc(t.top.blocks[b], isBlock(id)) {
			return b, true
		}
	}
	return 0, false
}

// isBlock returns whether a Block is block id.
func isBlock(id tree.BlockID) func(Block) bool {
	return func(x Block) bool { return x.Block.ID == id }
}

// takeTop serves the real requests whose block a top bucket on their path
// holds: it returns their results, the blocks taken and the buckets' new
// contents (applied when the operation commits). Only the first request
// for a block gets it.
func (t *Tree) takeTop(reqs []PathRead, results []ReadResult) (taken []tree.Block, changed []TopBucket) {
	claimed := map[tree.BlockID]bool{}
	left := map[uint64][]Block{} // per bucket changed: what it keeps
	for r, req := range reqs {
		if !req.Real || claimed[req.Want] {
			continue
		}
		b, ok := t.findTop(req.Leaf, req.Want)
		if !ok {
			continue
		}
		blocks, ok := left[b]
		if !ok {
			blocks = slices.Clone(t.top.blocks[b])
		}
		i := slices.IndexFunc(blocks, isBlock(req.Want))
		results[r] = ReadResult{Block: blocks[i].Block, Found: true}
		taken = append(taken, blocks[i].Block)
		left[b] = slices.Delete(blocks, i, i+1)
		claimed[req.Want] = true
	}
	for b, blocks := range left {
		changed = append(changed, TopBucket{Bucket: b, Blocks: blocks})
	}
	slices.SortFunc(changed, func(x, y TopBucket) int { return cmp.Compare(x.Bucket, y.Bucket) })
	return taken, changed
}

// topKept returns the blocks of the top buckets top, each with room for Z
// (an eviction's reads of them: they cost no I/O).
func (t *Tree) topKept(top []uint64) [][]Block {
	kept := make([][]Block, len(top))
	for i, b := range top {
		kept[i] = append(make([]Block, 0, t.p.Z), t.top.blocks[b]...)
	}
	return kept
}

// topWrites returns the new contents of the top buckets of an eviction
// whose contents changed.
func (t *Tree) topWrites(top []uint64, contents [][]Block) []TopBucket {
	var out []TopBucket
	for i, b := range top {
		if !sameBlocks(t.top.blocks[b], contents[i]) {
			out = append(out, TopBucket{Bucket: b, Blocks: slices.Clone(contents[i])})
		}
	}
	return out
}

func sameBlocks(a, b []Block) bool {
	return slices.EqualFunc(a, b, func(x, y Block) bool { return x.Block.ID == y.Block.ID && x.Leaf == y.Leaf })
}

// applyTop installs the new contents of top buckets, or none of them when
// one does not fit the top.
func (t *Tree) applyTop(changed []TopBucket) error {
	for _, tb := range changed {
		if !t.top.holds(tb.Bucket) || len(tb.Blocks) > t.p.Z {
			return fmt.Errorf("ringoram: %d blocks for bucket %d; the top holds buckets 0..%d of at most Z=%d blocks",
				len(tb.Blocks), tb.Bucket, len(t.top.blocks)-1, t.p.Z)
		}
	}
	for _, tb := range changed {
		t.top.blocks[tb.Bucket] = tb.Blocks
	}
	return nil
}

// forgetTop drops the copy of block id from top bucket b: nothing on
// storage holds it, so it goes at once instead of at a rewrite.
func (t *Tree) forgetTop(b uint64, id tree.BlockID) {
	t.top.blocks[b] = slices.DeleteFunc(slices.Clone(t.top.blocks[b]), isBlock(id))
}

// topState returns the non-empty top buckets, for a TreeState.
func (t *Tree) topState() []TopBucket {
	var out []TopBucket
	for b, blocks := range t.top.blocks {
		if len(blocks) > 0 {
			out = append(out, TopBucket{Bucket: uint64(b), Blocks: slices.Clone(blocks)})
		}
	}
	return out
}
