package ringoram

import (
	"context"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Init writes every bucket of the tree below the top levels held in
// memory, all Z+S slots and the metadata, with placed[b] the real blocks
// of bucket b (at most Z; placed nil: an empty tree): real blocks in
// random slots, every slot valid, count 0; the top buckets take theirs in
// memory. It
// serves a fresh tree and a bulk load. The writes are batches of whole
// buckets of about tree.DefaultBatchBytes each, never one call per
// bucket; each batch is atomic, the whole is not. The versions of the
// buckets of each written batch advance, so a failed Init leaves a tree
// to Init again, never two contents under one version.
func (d *Driver) Init(ctx context.Context, placed [][]Block) error {
	t := d.Tree
	nb := t.g.Buckets()
	if err := t.checkPlaced(placed); err != nil {
		return err
	}
	if err := d.settle(ctx); err != nil {
		return err
	}
	top := newTopCache(t.top.levels, t.g.L)
	for b := range top.blocks {
		if len(placed) > 0 {
			top.blocks[b] = slices.Clone(placed[b])
		}
	}
	t.top = top
	per := uint64(max(1, tree.DefaultBatchBytes/d.bucketBytes()))
	for lo := uint64(len(top.blocks)); lo < nb; lo += per {
		ws := t.exportWrites(t.initWrites(lo, min(nb, lo+per), placed))
		if err := d.write(ctx, ws); err != nil {
			t.forgetCopies(ws)
			return err
		}
		t.commit(ws)
		t.stats.BucketsWritten += uint64(len(ws))
	}
	return nil
}

// checkPlaced refuses, before any I/O, a layout Init cannot write.
func (t *Tree) checkPlaced(placed [][]Block) error {
	if len(placed) != 0 && uint64(len(placed)) != t.g.Buckets() {
		return fmt.Errorf("ringoram: Init with %d buckets for a tree of %d", len(placed), t.g.Buckets())
	}
	for b, blocks := range placed {
		if len(blocks) > t.p.Z {
			return fmt.Errorf("ringoram: Init with %d blocks in bucket %d; Z is %d", len(blocks), b, t.p.Z)
		}
		for _, blk := range blocks {
			if len(blk.Block.Value) > t.valueSize {
				return fmt.Errorf("ringoram: %d-byte value, value size %d", len(blk.Block.Value), t.valueSize)
			}
			if !t.g.OnPath(uint64(b), blk.Leaf) {
				return fmt.Errorf("ringoram: Init with a block of leaf %d in bucket %d, off its path", blk.Leaf, b)
			}
		}
	}
	return nil
}

// bucketBytes is the size of a bucket's items in a write.
func (d *Driver) bucketBytes() int {
	return d.p.slots()*(d.codec.SlotSize()+len(d.l.SlotAddr(0, 0))) +
		metaPlainSize(d.p.Z) + d.keys.Overhead() + len(d.l.MetaAddr(0))
}

// initWrites lays out buckets lo..hi-1 afresh.
func (t *Tree) initWrites(lo, hi uint64, placed [][]Block) []bucketWrite {
	n := t.p.slots()
	metas, slots := t.newMetas(int(hi-lo)), make([]*tree.Block, int(hi-lo)*n)
	ws := make([]bucketWrite, len(metas))
	for i := range ws {
		b := lo + uint64(i)
		var reals []Block
		if len(placed) > 0 {
			reals = placed[b]
		}
		metas[i].Version = t.versions[b] + 1
		ws[i] = t.rewrite(b, &metas[i], reals, slots[i*n:(i+1)*n])
	}
	return ws
}
