package pathoram

import (
	"context"
	"fmt"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// remote is the paths of a real store: buckets sealed by a tree.Codec on a
// backend, each bound to a version the proxy keeps (so a bucket replayed
// from an older write fails to authenticate), every write-back journaled
// in log before it is issued.
type remote struct {
	b          backend.Backend
	layout     tree.Layout
	codec      *tree.Codec
	batchBytes int
	log        *durable.Log

	// versions[i] is the version bucket i was last written with. It is
	// trusted state, saved with the position map.
	versions []uint64
	// pending is a write-back that failed: it is retried before anything
	// else touches storage, so storage never falls behind the proxy.
	pending []backend.Item
	// broken, once set, fails every later access (the store's state is no
	// longer consistent with storage, e.g. after a failed bulk load).
	broken error

	vers []uint64 // scratch: the versions of one path

	leak     leak           // tests only (leak.go)
	lastRead [][]tree.Block // leakUnchangedNotWritten: the buckets the last readPath returned
}

// settle retries a pending write-back.
func (r *remote) settle(ctx context.Context) error {
	if r.broken != nil {
		return r.broken
	}
	if r.pending == nil {
		return nil
	}
	if err := r.b.Write(ctx, r.pending); err != nil {
		return fmt.Errorf("pathoram: writing back the previous access (retried before every access): %w", err)
	}
	r.pending = nil
	return nil
}

// planRead journals an access's path read before it is issued; a journal
// that fails stops the store, as in writePath.
func (r *remote) planRead(_ context.Context, leaf uint64, id tree.BlockID) error {
	if r.broken != nil {
		return r.broken
	}
	return r.commit(r.log.Append(journalRead(leaf, id)))
}

// commit waits until the records up to lsn are durable; a journal that
// fails stops the store.
func (r *remote) commit(lsn uint64) error {
	if err := r.log.Sync(lsn); err != nil {
		r.broken = fmt.Errorf("pathoram: store stopped: %w", err)
		return r.broken
	}
	return nil
}

func (r *remote) readPath(ctx context.Context, path []uint64) ([][]tree.Block, error) {
	if err := r.settle(ctx); err != nil {
		return nil, err
	}
	r.vers = r.vers[:0]
	for _, b := range path {
		r.vers = append(r.vers, r.versions[b])
	}
	buckets, err := tree.ReadBuckets(ctx, r.b, r.layout, r.codec, path, r.vers)
	if r.leak == leakUnchangedNotWritten {
		r.lastRead = buckets
	}
	return buckets, err
}

// writePath seals every bucket of the path afresh under its next version,
// journals the access (its delta and the sealed buckets), and after it
// the next access's path read if ahead is planned, waits until both are
// durable (one fsync) and writes the buckets in one atomic call (Sec.
// IV-A step 3 "Writing-back"). A journal that fails stops the store: the
// access changed the proxy's state, and without its record a crash would
// lose it.
func (r *remote) writePath(ctx context.Context, path []uint64, contents [][]tree.Block, delta func() []byte, ahead *plannedRead) error {
	if r.leak == leakUnchangedNotWritten {
		path, contents = r.changedOnly(path, contents)
	}
	r.vers = r.vers[:0]
	for _, b := range path {
		r.vers = append(r.vers, r.versions[b]+1)
	}
	items, err := tree.EncodeBuckets(r.layout, r.codec, path, r.vers, contents)
	if err != nil {
		r.broken = fmt.Errorf("pathoram: store stopped after an internal error: %w", err)
		return r.broken
	}
	for i, b := range path {
		r.versions[b] = r.vers[i]
	}
	if r.log.Durable() {
		lsn := r.log.Append(delta(), durable.Op{Items: items})
		if ahead != nil {
			lsn = r.log.Append(journalRead(ahead.leaf, ahead.id))
		}
		if err := r.commit(lsn); err != nil {
			return err
		}
	}
	r.pending = items
	return r.settle(ctx)
}

// writeTree writes every bucket, contents(i) the blocks of bucket i, each
// under its next version, in backend writes of about batchBytes (never one
// per bucket). It is used to initialise the tree and by the bulk load.
func (r *remote) writeTree(ctx context.Context, contents func(bucket uint64) []tree.Block) error {
	w := tree.BatchWriter{B: r.b, MaxBytes: r.batchBytes}
	for i := range uint64(len(r.versions)) {
		addr := r.layout.Addr(i)
		r.versions[i]++
		data, err := r.codec.EncodeBucket(addr, r.versions[i], contents(i))
		if err != nil {
			return fmt.Errorf("bucket %d: %w", i, err)
		}
		if err := w.Add(ctx, backend.Item{Addr: addr, Value: data}); err != nil {
			return err
		}
	}
	return w.Flush(ctx)
}
