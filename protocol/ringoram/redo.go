package ringoram

import (
	"context"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// An owner that journals Changes and not Writes (Config.WriteAhead)
// recovers the operations whose Writes may not have reached storage:
// Landed tells whether one's Write landed; if it did, its Change is
// applied (ResolveTop, Apply), and if not, the operation runs again under
// its Plan from the state it started from (Redo).

// Landed reports whether the Write of c reached storage: ONE backend Read
// of the metadata of the buckets c wrote (addresses storage saw in that
// Write) finds them all at c's versions or later ones (true: versions only
// grow) or all at earlier ones (false). A Write is atomic and a tree's
// Writes land in order: anything else is tampering. The records read that are at the
// versions the Tree expects are kept (metaCache), so a Redo from this
// state reads no metadata again.
func (d *Driver) Landed(ctx context.Context, c Change) (bool, error) {
	buckets, err := d.LandedReads(c)
	if err != nil || len(buckets) == 0 {
		return err == nil, err
	}
	plains, err := d.ReadMetas(ctx, buckets)
	if err != nil {
		return false, err
	}
	return d.LearnLanded(c, plains)
}

// LandedReads returns the buckets whose metadata tells whether the Write
// of c landed (Landed): those c wrote, none below the top.
func (t *Tree) LandedReads(c Change) ([]uint64, error) {
	out := make([]uint64, len(c.Buckets))
	for i, bv := range c.Buckets {
		if bv.Bucket >= t.g.Buckets() || t.top.holds(bv.Bucket) {
			return nil, fmt.Errorf("ringoram: a change of bucket %d, outside the tree's storage", bv.Bucket)
		}
		out[i] = bv.Bucket
	}
	return out, nil
}

// LearnLanded takes the plaintexts of the metadata records LandedReads
// named and reports whether the Write of c landed (Landed).
func (t *Tree) LearnLanded(c Change, plains [][]byte) (bool, error) {
	if len(plains) != len(c.Buckets) {
		return false, fmt.Errorf("ringoram: %d metadata records for %d buckets", len(plains), len(c.Buckets))
	}
	metas := t.newMetas(len(plains))
	later := 0
	for i, bv := range c.Buckets {
		if err := metas[i].parse(plains[i], t.p, t.g, bv.Bucket); err != nil {
			return false, fmt.Errorf("ringoram: metadata of bucket %d: %w", bv.Bucket, err)
		}
		if metas[i].Version >= bv.Version {
			later++
		}
	}
	switch later {
	case len(c.Buckets):
		return true, nil
	case 0:
		for i, bv := range c.Buckets {
			if metas[i].Version == t.versions[bv.Bucket] {
				t.cache.put(bv.Bucket, &metas[i])
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("%w: of %d buckets one Write changed, %d are at its versions or later ones",
		seal.ErrTampered, len(c.Buckets), later)
}

// ResolveTop fills in the values of the blocks of c's top buckets, which
// a journal keeps as IDs and leaves: each is a block the top held before
// the operation, one it placed (c.Placed) or one it lifted from storage
// (c.Lifted). The Tree must be in the state c started from.
func (t *Tree) ResolveTop(c *Change) error {
	values := map[tree.BlockID][]byte{}
	for _, blocks := range t.top.blocks {
		for _, b := range blocks {
			values[b.Block.ID] = b.Block.Value
		}
	}
	for _, p := range c.Placed {
		values[p.ID] = p.Value
	}
	for _, b := range c.Lifted {
		values[b.ID] = b.Value
	}
	for i := range c.Top {
		blocks := slices.Clone(c.Top[i].Blocks)
		for j := range blocks {
			v, ok := values[blocks[j].Block.ID]
			if !ok {
				return fmt.Errorf("ringoram: top bucket %d holds a block that was neither in the top nor placed", c.Top[i].Bucket)
			}
			blocks[j].Block.Value = v
		}
		c.Top[i].Blocks = blocks
	}
	return nil
}

// Redo runs again the operation of Plan p that made c, whose Write Landed
// found missing, from the state c started from: the plan's seed draws the
// same slots, so its Reads are the ones storage may have seen (Treebeard
// Sec. 5.3.3 reads an operation cut short again with the slots it chose),
// the blocks c placed are offered again in the same order and land where
// they did, and the Write is issued at once, without the hooks. It fails
// if the operation does not make c again (c's top buckets compared by
// their blocks' IDs and leaves).
func (d *Driver) Redo(ctx context.Context, p Plan, c Change) error {
	blocks := make([]Block, len(c.Placed))
	for i, pl := range c.Placed {
		blocks[i] = Block{Block: tree.Block{ID: pl.ID, Value: pl.Value}, Leaf: pl.Leaf}
	}
	d.Resume(p)
	d.redoing = true
	defer func() { d.redoing = false }()
	w, err := d.readEvict(ctx, p.Reads, p.Evict, blocks)
	if err != nil {
		return err
	}
	if !sameChange(w.Change, c) {
		return fmt.Errorf("ringoram: the operation run again under its plan changed the tree otherwise than its record says")
	}
	return nil
}

// sameChange reports whether a and b change the same buckets to the same
// versions and move the same blocks (values of placed and top blocks
// aside).
func sameChange(a, b Change) bool {
	return a.Evicted == b.Evicted && slices.Equal(a.Buckets, b.Buckets) &&
		slices.EqualFunc(a.Taken, b.Taken, func(x, y tree.Block) bool { return x.ID == y.ID }) &&
		slices.EqualFunc(a.Lifted, b.Lifted, func(x, y tree.Block) bool { return x.ID == y.ID }) &&
		slices.EqualFunc(a.Placed, b.Placed, func(x, y Placement) bool { return x.ID == y.ID && x.Bucket == y.Bucket }) &&
		slices.EqualFunc(a.Top, b.Top, func(x, y TopBucket) bool { return x.Bucket == y.Bucket && sameBlocks(x.Blocks, y.Blocks) })
}
