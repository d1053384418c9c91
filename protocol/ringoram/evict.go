package ringoram

import (
	"context"
	"fmt"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Block is a real block with the leaf it is mapped to: a stash block
// offered to an eviction, a block a bucket holds, or one Init places.
type Block struct {
	Block tree.Block
	Leaf  uint64
}

// Evict evicts the next k paths in reverse-lexicographic order (a
// multi-path eviction, Treebeard Sec. 5.3.2; EvictionLeaves(k) are the
// leaves), in these backend calls and no others, U being the union of the
// k paths below the top levels held in memory (topCache), whose buckets
// on the paths take part in step 3 at no I/O:
//
//  1. ONE Read of the metadata of the buckets of U the Tree has no copy
//     of (metaCache), none when it has them all.
//  2. ONE Read of exactly Z slots per bucket of U: its live real blocks,
//     padded with uniformly random valid slots (Ring ORAM's ReadBucket).
//  3. (No I/O.) The live real blocks read and the stash blocks offered
//     are placed as deep as their leaves allow, bucket by bucket from the
//     deepest level of U up (Ring ORAM's EvictPath). Every block read is
//     placed again in U: a bucket's blocks can always stay where they
//     were, and each bucket prefers them to stash blocks.
//  4. ONE atomic Write of every bucket of U: all Z+S slots in a fresh
//     permutation and its metadata.
//
// Moving blocks read in step 2 departs from Treebeard Sec. 5.3.3, which
// pins them to their bucket so that an eviction's buckets written one at
// a time can never lose one: step 4 writes the whole of U atomically on
// every backend, so a block is in its old bucket or its new one, never in
// neither, and stashes hold far fewer blocks than with blocks pinned
// (docs/protocols.md, "Treebeard: stash size over time").
//
// It returns, for each block offered, the bucket it was placed in, or -1:
// the block stays in the caller's stash. Stale copies in the buckets of U
// are dropped. On any error the Tree's state is unchanged (with
// Config.WriteAhead, once the hook has returned the eviction is committed,
// and a failed Write is issued again before the next operation).
func (d *Driver) Evict(ctx context.Context, k int, blocks []Block) ([]int64, error) {
	if k < 1 {
		return nil, fmt.Errorf("ringoram: eviction of %d paths", k)
	}
	_, where, err := d.ReadEvict(ctx, nil, k, blocks)
	return where, err
}

// checkBlocks refuses, before any I/O, blocks an eviction cannot write.
func (t *Tree) checkBlocks(blocks []Block) error {
	for _, b := range blocks {
		if b.Leaf >= t.g.Leaves() {
			return fmt.Errorf("ringoram: block for leaf %d in a tree of %d leaves", b.Leaf, t.g.Leaves())
		}
		if len(b.Block.Value) > t.valueSize {
			return fmt.Errorf("ringoram: %d-byte value, value size %d", len(b.Block.Value), t.valueSize)
		}
	}
	return nil
}

// place decides the contents of every bucket of union (Ring ORAM's
// EvictPath over the union of the evicted paths): each block starts at
// the deepest bucket of union on its own path; buckets are filled from
// the deepest level up, at most Z blocks each, and a bucket's leftover
// blocks move on to its parent. Filling bottom-up places as many blocks
// as any placement could. kept[i] are the blocks read from union[i], which
// a bucket takes before stash blocks, so all of them are placed again
// (they fit where they were). where[j] is stash block j's bucket, or -1.
func (t *Tree) place(union []uint64, kept [][]Block, blocks []Block) (contents [][]Block, where []int64, err error) {
	read := make([][]Block, len(union)) // per bucket: blocks read from the tree that wait there
	stash := make([][]int, len(union))  // per bucket: stash blocks (indices into blocks) that wait there
	for i := range union {
		for _, b := range kept[i] {
			d := t.deepestBucket(union, b.Leaf)
			read[d] = append(read[d], b)
		}
	}
	for j := range blocks {
		d := t.deepestBucket(union, blocks[j].Leaf)
		stash[d] = append(stash[d], j)
	}
	where = make([]int64, len(blocks))
	for j := range where {
		where[j] = -1
	}
	z := t.p.Z
	contents = make([][]Block, len(union))
	all := make([]Block, len(union)*z)
	for i := len(union) - 1; i >= 0; i-- {
		c := all[i*z : i*z : (i+1)*z]
		n := min(len(read[i]), z)
		c = append(c, read[i][:n]...)
		m := min(len(stash[i]), z-n)
		for _, j := range stash[i][:m] {
			c = append(c, blocks[j])
			where[j] = int64(union[i])
		}
		contents[i] = c
		if i == 0 { // the root: what is left stays in the stash
			if n < len(read[i]) {
				return nil, nil, fmt.Errorf("ringoram: internal error: an eviction left a block it read unplaced")
			}
			break
		}
		parent := index(union, (union[i]-1)/2)
		read[parent] = append(read[parent], read[i][n:]...)
		stash[parent] = append(stash[parent], stash[i][m:]...)
	}
	return contents, where, nil
}

// deepestBucket returns the index in union of the deepest bucket of union
// on the path to leaf (a union of paths holds every ancestor of its
// buckets).
func (t *Tree) deepestBucket(union []uint64, leaf uint64) int {
	i := 0 // the root
	for lvl := 1; lvl <= t.g.L; lvl++ {
		j := index(union, t.g.BucketAt(leaf, lvl))
		if j < 0 {
			break
		}
		i = j
	}
	return i
}
