package ringoram

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// EvictBlock is a stash block offered to an eviction, with its leaf.
type EvictBlock struct {
	Block tree.Block
	Leaf  uint64
}

// Evict evicts the next k paths in reverse-lexicographic order (a
// multi-path eviction, Treebeard Sec. 5.3.2; EvictionLeaves(k) are the
// leaves), in these backend calls and no others:
//
//  1. ONE Read of the metadata of the union U of the k paths.
//  2. ONE Read of exactly Z slots per bucket of U: its live real blocks,
//     padded with uniformly random valid slots (Ring ORAM's ReadBucket).
//  3. (No I/O.) Every live real block keeps its bucket (Sec. 5.3.3, so a
//     crash during an eviction loses no block); the remaining room of the
//     buckets of U is filled with blocks greedily, deepest bucket first,
//     each only on its own leaf's path.
//  4. ONE atomic Write of every bucket of U: all Z+S slots in a fresh
//     permutation and its metadata.
//
// It returns, for each block, the bucket it was placed in, or -1: the
// block stays in the caller's stash. Stale copies in the buckets of U are
// dropped. On any error the Tree's state is unchanged (with
// Config.WriteAhead, once the hook has returned the eviction is committed,
// and a failed Write is issued again before the next operation).
func (t *Tree) Evict(ctx context.Context, k int, blocks []EvictBlock) ([]int64, error) {
	if k < 1 {
		return nil, fmt.Errorf("ringoram: eviction of %d paths", k)
	}
	if err := t.checkBlocks(blocks); err != nil {
		return nil, err
	}
	if err := t.settle(ctx); err != nil {
		return nil, err
	}
	union := t.g.Union(t.EvictionLeaves(k), nil)
	metas, err := t.readMeta(ctx, union)
	if err != nil {
		return nil, err
	}
	all := make([]int, len(union))
	for i := range all {
		all[i] = i
	}
	kept, err := t.readReal(ctx, union, metas, all)
	if err != nil {
		return nil, err
	}
	where, into := t.place(union, kept, blocks)
	ws := t.evictWrites(union, metas, kept, blocks, into)
	c := Change{Evicted: k}
	for j, b := range where {
		if b >= 0 {
			c.Placed = append(c.Placed, Placement{ID: blocks[j].Block.ID, Bucket: uint64(b)})
		}
	}
	if err := t.writeChange(ctx, ws, c); err != nil {
		return nil, err
	}
	t.evictions += uint64(k)
	t.stats.Evictions++
	t.stats.EvictedPaths += uint64(k)
	t.stats.BucketsWritten += uint64(len(union))
	return where, nil
}

// checkBlocks refuses, before any I/O, blocks an eviction cannot write.
func (t *Tree) checkBlocks(blocks []EvictBlock) error {
	for _, b := range blocks {
		if b.Leaf >= t.g.Leaves() {
			return fmt.Errorf("ringoram: block for leaf %d in a tree of %d leaves", b.Leaf, t.g.Leaves())
		}
		if len(b.Block.Value) > t.codec.ValueSize() {
			return fmt.Errorf("ringoram: %d-byte value, value size %d", len(b.Block.Value), t.codec.ValueSize())
		}
	}
	return nil
}

// place decides where each block goes (Sec. 5.3.2): bucket union[i] has
// room for Z minus its kept blocks. Blocks that can go deepest come first;
// each goes to the deepest bucket of union on its own path with room.
// where[j] is block j's bucket and into[j] its index in union, -1 when it
// stays in the stash.
func (t *Tree) place(union []uint64, kept [][]tree.Block, blocks []EvictBlock) (where []int64, into []int32) {
	room, total := make([]int, len(union)), 0
	for i := range union {
		room[i] = t.p.Z - len(kept[i])
		total += room[i]
	}
	where, into = make([]int64, len(blocks)), make([]int32, len(blocks))
	depth, order := make([]int, len(blocks)), make([]int, len(blocks))
	for j, b := range blocks {
		where[j], into[j], order[j] = -1, -1, j
		depth[j] = t.deepest(union, b.Leaf)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(depth[b], depth[a]) })
	for _, j := range order {
		if total == 0 {
			break
		}
		for lvl := depth[j]; lvl >= 0; lvl-- {
			i := index(union, t.g.BucketAt(blocks[j].Leaf, lvl))
			if room[i] > 0 {
				room[i]--
				total--
				where[j], into[j] = int64(union[i]), int32(i)
				break
			}
		}
	}
	return where, into
}

// deepest returns the deepest level at which the path to leaf meets union
// (a union of paths holds every ancestor of its buckets).
func (t *Tree) deepest(union []uint64, leaf uint64) int {
	lvl := 0
	for lvl < t.g.L && index(union, t.g.BucketAt(leaf, lvl+1)) >= 0 {
		lvl++
	}
	return lvl
}

// evictWrites lays out every bucket of union afresh with its kept blocks
// and the blocks placed into it (kept[i] has room for Z blocks).
func (t *Tree) evictWrites(union []uint64, metas []meta, kept [][]tree.Block, blocks []EvictBlock, into []int32) []bucketWrite {
	for j, i := range into {
		if i >= 0 {
			kept[i] = append(kept[i], blocks[j].Block)
		}
	}
	t.nextVersions(union, metas)
	n := t.p.slots()
	ws, slots := make([]bucketWrite, len(union)), make([]*tree.Block, len(union)*n)
	for i, b := range union {
		ws[i] = t.rewrite(b, &metas[i], kept[i], slots[i*n:(i+1)*n])
	}
	return ws
}
