package pathoram

import (
	"context"
	"fmt"
	"slices"

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
	// pending are write-backs that failed, oldest first: they are retried
	// before anything else touches storage, so storage never falls behind
	// the proxy.
	pending [][]backend.Item
	// inflight is the write-back an access handed to the access after it
	// (writePath): journaled, its record's fsync under way, and not issued
	// yet. The next access reads its own path meanwhile, taking the
	// buckets the two paths share from here, and issues it once durable.
	inflight *writeBack
	// broken, once set, fails every later access (the store's state is no
	// longer consistent with storage, e.g. after a failed bulk load).
	broken error

	synced uint64   // the journal is durable up to here (commit)
	vers   []uint64 // scratch: the versions of one path

	leak     leak           // tests only (leak.go)
	lastRead [][]tree.Block // leakUnchangedNotWritten: the buckets the last readPath returned
}

// writeBack is an access's write-back, journaled and handed to the
// next access to issue (remote.inflight).
type writeBack struct {
	ctx      context.Context // the access's own: its write-back runs under it
	lsn      uint64          // its record's, or the last read planned with it
	items    []backend.Item
	path     []uint64       // the buckets written,
	contents [][]tree.Block // and the blocks written to each
	done     chan struct{}  // closed once issued; err is its outcome
	err      error
}

// Wait waits until the write-back is issued and returns its outcome.
func (w *writeBack) Wait() error {
	<-w.done
	return w.err
}

// settle retries the pending write-backs, in order.
func (r *remote) settle(ctx context.Context) error {
	if r.broken != nil {
		return r.broken
	}
	for len(r.pending) > 0 {
		if err := r.b.Write(ctx, r.pending[0]); err != nil {
			return fmt.Errorf("pathoram: writing back an earlier access (retried before every access): %w", err)
		}
		r.pending = r.pending[1:]
	}
	r.pending = nil
	return nil
}

// behind reports whether storage lacks a write-back the state holds.
func (r *remote) behind() bool { return len(r.pending) > 0 || r.inflight != nil }

// planRead journals an access's path read, to be durable before it is
// issued (awaitPlan), and returns its record's LSN.
func (r *remote) planRead(p plannedRead) uint64 {
	return r.log.Append(journalRead(p))
}

// awaitPlan waits until the path read journaled at lsn is durable; a
// journal that fails stops the store, as in writePath.
func (r *remote) awaitPlan(lsn uint64) error {
	if r.broken != nil {
		return r.broken
	}
	return r.commit(lsn)
}

// commit waits until the records up to lsn are durable; a journal that
// fails stops the store.
func (r *remote) commit(lsn uint64) error {
	if lsn <= r.synced {
		return nil
	}
	if err := r.log.Sync(lsn); err != nil {
		r.broken = fmt.Errorf("pathoram: store stopped: %w", err)
		return r.broken
	}
	r.synced = lsn
	return nil
}

// readPath reads the buckets of path in one backend call. A bucket the
// write-back in flight rewrites is read all the same, as stored (under
// the version before), and its blocks are taken from the write-back.
func (r *remote) readPath(ctx context.Context, path []uint64) ([][]tree.Block, error) {
	if err := r.settle(ctx); err != nil {
		return nil, err
	}
	read := path
	if r.leak == leakInflightNotRead {
		read = r.notRewritten(path)
	}
	r.vers = r.vers[:0]
	for _, b := range read {
		v := r.versions[b]
		if _, rewritten := r.inflightContents(b); rewritten {
			v--
		}
		r.vers = append(r.vers, v)
	}
	buckets, err := tree.ReadBuckets(ctx, r.b, r.layout, r.codec, read, r.vers)
	if err != nil {
		return nil, err
	}
	if len(read) < len(path) {
		buckets = withRewrittenLeft(path, read, buckets)
	}
	for i, b := range path {
		if c, rewritten := r.inflightContents(b); rewritten {
			buckets[i] = c
		}
	}
	if r.leak == leakUnchangedNotWritten {
		r.lastRead = buckets
	}
	return buckets, nil
}

// inflightContents returns the blocks the write-back in flight writes to
// bucket b, if it writes b.
func (r *remote) inflightContents(b uint64) ([]tree.Block, bool) {
	if r.inflight == nil {
		return nil, false
	}
	if i := slices.Index(r.inflight.path, b); i >= 0 {
		return r.inflight.contents[i], true
	}
	return nil, false
}

// writePath seals every bucket of the path afresh under its next version
// and journals the access (its delta and the sealed buckets), then the
// path reads planned ahead (their LSNs set in ahead). It then issues the
// write-back in flight, the access before's, once durable. Unless
// handOff, it waits until its own record is durable and writes the
// buckets in one atomic call (Sec. IV-A step 3 "Writing-back"); with
// handOff, it leaves its write-back in flight for the next access to
// issue, and returns it. A journal that fails stops the store: the access
// changed the proxy's state, and without its record a crash would lose it.
func (r *remote) writePath(ctx context.Context, path []uint64, contents [][]tree.Block, delta func() []byte, ahead []plannedRead, handOff bool) (*writeBack, error) {
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
		return nil, r.broken
	}
	for i, b := range path {
		r.versions[b] = r.vers[i]
	}
	w := &writeBack{ctx: ctx, items: items}
	if r.log.Durable() {
		w.lsn = r.log.Append(delta(), durable.Op{Items: items})
		for i := range ahead {
			ahead[i].lsn = r.planRead(ahead[i])
			w.lsn = ahead[i].lsn // one fsync makes them durable with the record
		}
		if handOff {
			// The fsync starts now, while the next access reads; an
			// error is issue's to report, when it commits the record.
			go r.log.Sync(w.lsn)
		}
	}
	r.finishInflight()
	if r.broken != nil {
		return nil, r.broken
	}
	if !handOff {
		return nil, r.issue(w)
	}
	w.path, w.contents, w.done = slices.Clone(path), make([][]tree.Block, len(path)), make(chan struct{})
	for i := range contents {
		w.contents[i] = slices.Clone(contents[i])
	}
	r.inflight = w
	return w, nil
}

// finishInflight issues the write-back in flight, if any, and tells its
// access the outcome.
func (r *remote) finishInflight() {
	w := r.inflight
	if w == nil {
		return
	}
	r.inflight = nil
	w.err = r.issue(w)
	close(w.done)
}

// issue waits until w's record is durable and writes it, after the
// write-backs still pending; when it returns, w is written, or (after an
// error) pending.
func (r *remote) issue(w *writeBack) error {
	if r.log.Durable() {
		if err := r.commit(w.lsn); err != nil {
			return err
		}
	}
	r.pending = append(r.pending, w.items)
	return r.settle(w.ctx)
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
