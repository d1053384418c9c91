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

// writeChange seals ws into the items of ONE atomic backend Write, hands
// the operation's Change to the write-ahead hook, if any, then issues the
// Write and commits the new versions. Without a hook (or in a Redo) a failed
// Write fails the operation and changes nothing. With one, the operation
// is committed once the hook returns (a crash would redo it), and returns
// at once: its Write goes to storage with the tree's next Read, in one
// round trip that applies the Write first (backend.Pipeline), or on its
// own at Flush, whichever comes first.
func (t *Tree) writeChange(ctx context.Context, ws []bucketWrite, c *Change) error {
	items, err := t.encode(ws)
	if err != nil {
		return err
	}
	c.Buckets = make([]BucketVersion, len(ws))
	for i, w := range ws {
		c.Buckets[i] = BucketVersion{Bucket: w.bucket, Version: w.meta.Version, Full: w.slots != nil}
	}
	if t.writeAhead == nil || t.redoing {
		if err := t.b.Write(ctx, items); err != nil {
			t.forgetCopies(ws) // storage may hold the Write or not
			return err
		}
		t.commit(ws)
		return t.applyTop(c.Top)
	}
	if err := t.writeAhead(ctx, *c); err != nil {
		return err
	}
	t.commit(ws)
	t.pending = items
	return t.applyTop(c.Top)
}

// Flush issues the Write of the last committed operation if it has not
// reached storage yet: before the Tree's state is checkpointed, and when
// its owner has nothing else to do.
func (t *Tree) Flush(ctx context.Context) error { return t.settle(ctx) }

// forgetCopies drops the metadata copies of the buckets of a Write that
// failed: storage may have applied it, and the next read must check.
func (t *Tree) forgetCopies(ws []bucketWrite) {
	for _, w := range ws {
		t.cache.forget(w.bucket)
	}
}

// settle issues the Write of a committed operation that has not reached
// storage (held for the next Read, or failed with it).
func (t *Tree) settle(ctx context.Context) error {
	if t.pending == nil {
		return nil
	}
	if err := t.b.Write(ctx, t.pending); err != nil {
		return fmt.Errorf("ringoram: writing back the previous operation: %w", err)
	}
	t.pending = nil
	return nil
}
