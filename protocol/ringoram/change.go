package ringoram

import (
	"context"
	"fmt"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Change is what one multi-path read or eviction changes in a Tree's
// trusted state, handed to Config.WriteAhead before its Write is issued,
// so a caller can journal it: applied to the state the operation started
// from (Apply), it gives the state the operation leaves. It holds no
// sealed item: the Write follows from the state the operation started
// from, its Plan and what its Reads bring in, so an operation whose Write
// may not have reached storage is run again (Landed, Redo).
type Change struct {
	Buckets []BucketVersion // every bucket the Write holds, with its new metadata version
	Evicted int             // paths evicted (the eviction counter advances by it)
	Taken   []tree.Block    // blocks a path read took out of the tree, to their requests
	Placed  []Placement     // blocks an eviction placed
	Top     []TopBucket     // the top buckets whose contents changed, as they are now
	Lifted  []tree.Block    // blocks an eviction read from storage and placed in a top bucket
}

// BucketVersion is one bucket of a Write and its new metadata version;
// Full when all its slots were rewritten too (its stale copies are gone).
type BucketVersion struct {
	Bucket  uint64
	Version uint64
	Full    bool
}

// Placement is a block an eviction was offered and placed in a bucket,
// with the leaf and value it was offered with: what a Redo of the
// eviction offers again.
type Placement struct {
	ID     tree.BlockID
	Bucket uint64
	Leaf   uint64
	Value  []byte
}

// WriteAhead is called with an operation's Change before its Write is
// issued; an error fails the operation without writing anything.
type WriteAhead func(ctx context.Context, c Change) error

// Apply applies a Change to the trusted state, as the operation that made
// it did once its Write succeeded: recovery replays journaled Changes.
func (t *Tree) Apply(c Change) error {
	for _, bv := range c.Buckets {
		if bv.Bucket >= t.g.Buckets() {
			return fmt.Errorf("ringoram: a change of bucket %d in a tree of %d buckets", bv.Bucket, t.g.Buckets())
		}
		t.versions[bv.Bucket] = bv.Version
		t.cache.forget(bv.Bucket)
		if bv.Full {
			delete(t.stale, bv.Bucket)
		}
	}
	if err := t.applyTop(c.Top); err != nil {
		return err
	}
	t.evictions += uint64(c.Evicted)
	return nil
}
