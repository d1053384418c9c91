package taostore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
	"github.com/oblivkv/oblivkv/seal"
)

func init() {
	kv.Register(kv.Protocol{
		Name:    "taostore",
		Summary: "TaoStore: concurrent, asynchronous Path ORAM with a Sequencer; also hides response timing from an active adversary",
		Open:    kv.FactoryOf(open),
		Options: Options{},
		Audit:   auditSpec,
		Reseal:  newResealer,
	})
}

// BucketPrefix begins the storage address of every bucket of the tree.
const BucketPrefix = "tao/b/"

func errFull(capacity int) error { return fmt.Errorf("%w: %d keys", kv.ErrFull, capacity) }

type store struct {
	kv.ByUpdate // Get, Put and Delete: Updates of the store itself

	b         backend.Backend
	keys      *seal.Keys
	geo       tree.Geometry
	codec     *tree.Codec
	layout    tree.Layout
	opts      Options
	capacity  int
	valueSize int

	log           *durable.Log
	checkpointing sync.Mutex // held by a checkpoint
	commit        committer  // syncs the journal (commit.go); its queue is guarded by mu

	mu       sync.Mutex      // guards everything below
	broken   error           // the journal failed: the store serves nothing more
	inflight map[uint64]bool // versions of the write-backs in flight
	landed   *sync.Cond      // signalled when a write-back ends
	rng      *rand.Rand
	pos      map[tree.BlockID]uint64 // position map: block -> leaf
	names    map[tree.BlockID]string // block -> its key, for kv.KeyLister (a key an earlier build stored has none)
	stash    map[tree.BlockID][]byte
	sub      *subtree
	reqs     map[tree.BlockID][]*request // request map (Sec. IV-B step 1)
	// unfinished are the path reads planned and not processed, by number:
	// storage may have served them (finishUnfinished).
	unfinished map[uint64]plannedPath
	nextPlan   uint64
	seq        sequencer
	flushed    []uint64 // leaves flushed since the last write-back
	version    uint64   // version of the last write-back
	acked      []uint64 // per bucket: newest version storage acknowledged
	counters   counters

	// loadCut: the last record replayed began a bulk load, never
	// checkpointed (recover writes the tree afresh).
	loadCut bool

	onStorage map[uint64][]tree.Block // leakUnchangedNotWritten: what storage holds, as far as the proxy knows

	// Scratch space of flush, reused under mu.
	flusher     *tree.Flusher
	nodeBuf     []*node
	flushBlocks []tree.Block
	flushLeaves []uint64
	flushLevels []int
}

// counters are the protocol's statistics.
type counters struct {
	realReads, fakeReads, writeBacks, staleBuckets, writeBackErrors, readRetries uint64
	stashMax                                                                     int
}

func open(ctx context.Context, env kv.Env) (*store, error) {
	opts, err := kv.ResolveOptions[Options]("taostore", env)
	if err != nil {
		return nil, err
	}
	if opts.TestingKnobs.Leak, err = envLeak(opts.TestingKnobs.Leak); err != nil { // a leak only in oblivkv_leaks builds (leak.go)
		return nil, err
	}
	geo := tree.NewGeometry(env.Capacity)
	seed, err := random.Root(opts.TestingKnobs.Seed)
	if err != nil {
		return nil, fmt.Errorf("taostore: %w", err)
	}
	if opts.TestingKnobs.Leak == leakFixedSeed {
		seed = random.Seed{}
	}
	s := &store{b: env.Backend, keys: env.Keys, geo: geo, opts: opts, capacity: env.Capacity, valueSize: env.ValueSize,
		codec: tree.NewCodec(env.Keys, opts.Z, env.ValueSize), layout: tree.Layout{Prefix: BucketPrefix},
		rng: rand.New(random.New(seed)), pos: map[tree.BlockID]uint64{}, names: map[tree.BlockID]string{},
		stash: map[tree.BlockID][]byte{}, sub: newSubtree(geo, opts.CachedLevels),
		reqs: map[tree.BlockID][]*request{}, acked: make([]uint64, geo.Buckets()), unfinished: map[uint64]plannedPath{},
		flusher: tree.NewFlusher(geo, opts.Z), seq: sequencer{released: opts.TestingKnobs.Released, leak: opts.TestingKnobs.Leak},
		inflight: map[uint64]bool{}, commit: newCommitter()}
	s.landed = sync.NewCond(&s.mu)
	s.ByUpdate = kv.ByUpdate{Updater: s}
	s.log = durable.New(env.Journal, env.Backend, env.Keys)
	if err := s.start(ctx, env.Fresh); err != nil {
		return nil, err
	}
	go s.commitLoop()
	return s, nil
}

// start recovers an existing store, or writes a fresh one's tree and
// creates its journal.
func (s *store) start(ctx context.Context, fresh bool) error {
	if !fresh {
		return s.recover(ctx)
	}
	if err := s.writeInitial(ctx, nil); err != nil {
		return err
	}
	st, _, err := s.encodeState()
	if err != nil {
		return err
	}
	return s.log.Create(ctx, st)
}

func (s *store) randomLeaf() uint64 { return s.rng.Uint64N(s.geo.Leaves()) }

// blockID is the block identifier of a key: the bare PRF of the key, not
// tree.IDOf (which adds a domain), because stores already written hold
// blocks and position maps under these identifiers.
func (s *store) blockID(key string) tree.BlockID { return s.keys.PRF([]byte(key)) }

// Update implements kv.Updater: the mutation runs when its block is in
// the proxy (ANSWER-REQUEST), so every kind is one request, as a Get is.
func (s *store) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	m.Arg = bytes.Clone(m.Arg)
	r, err := s.access(ctx, m, key)
	if err != nil {
		return kv.Result{}, err
	}
	return r.result, r.err
}

// access runs one request through the Processor and waits for the
// Sequencer to release its reply (Sec. IV-B, Fig. 5).
func (s *store) access(ctx context.Context, m kv.Mutation, key string) (*request, error) {
	r := &request{m: m, id: s.blockID(key), key: key, done: make(chan struct{})}
	if err := s.arrive(r); err != nil {
		return nil, err
	}
	// The path read and everything after it complete even if the caller
	// gives up: what storage sees must not depend on the caller.
	fetched, versions, err := s.readPlanned(context.WithoutCancel(ctx), r)
	s.pathReturned(r, fetched, versions, err)
	select {
	case <-r.done:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// arrive enqueues r and chooses its path: the block's real path for the
// first request on a block, a random path for the rest (READ-PATH).
func (s *store) arrive(r *request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	s.seq.add(r)
	if len(s.reqs[r.id]) == 0 {
		r.real = true
		leaf, ok := s.pos[r.id]
		switch {
		case ok:
		case s.opts.TestingKnobs.Leak == leakMissingKeyedLeaf:
			leaf = s.keyedLeaf(r.id)
		default: // a missing block reads a random path, like any other
			leaf = s.randomLeaf()
		}
		r.leaf = leaf
		s.counters.realReads++
	} else {
		r.leaf = s.randomLeaf()
		if leaf, ok := s.pos[r.id]; ok && s.opts.TestingKnobs.Leak == leakRepeatReadsRealPath {
			r.leaf = leaf
		}
		s.counters.fakeReads++
	}
	s.reqs[r.id] = append(s.reqs[r.id], r)
	s.sub.request(r.leaf)
	s.plan(r)
	return nil
}

// plannedPath is a path read planned for a request: its leaf and, for a
// block's real read, the block. It outlives a crash in the journal and in
// checkpoints until its path is processed.
type plannedPath struct {
	Leaf uint64
	ID   tree.BlockID
	Real bool
}

// plan numbers r's path read and journals it: the read is issued only
// once the committer has made the record durable (readPlanned); s.mu is
// held.
func (s *store) plan(r *request) {
	r.plan = s.nextPlan
	s.nextPlan++
	p := plannedPath{Leaf: r.leaf, Real: r.real}
	if r.real {
		p.ID = r.id
	}
	s.unfinished[r.plan] = p
	r.planLSN = s.journal(readDelta(r.plan, p))
	s.awaitPlan(r)
	if s.opts.TestingKnobs.Trace != nil {
		s.opts.TestingKnobs.Trace(r.leaf, r.id, r.real)
	}
}

// readPlanned reads r's path once its plan is durable (unless the store
// stopped meanwhile), and while storage fails the read issues the
// identical read again (backend.Retry). A read that may have reached
// storage is never left for the block's next access to repeat: that
// access would read the same path, and storage would link the two (the
// argument of Treebeard Sec. 5.3.3, for one path). A crash, or a store
// closed meanwhile, leaves the read to recovery (finishUnfinished).
func (s *store) readPlanned(ctx context.Context, r *request) ([][]tree.Block, []uint64, error) {
	<-r.planned
	if r.planErr != nil {
		return nil, nil, r.planErr
	}
	var fetched [][]tree.Block
	var versions []uint64
	err := backend.Retry(ctx, nil, func() {
		s.mu.Lock()
		s.counters.readRetries++
		s.mu.Unlock()
	}, func() (err error) {
		fetched, versions, err = s.readPath(ctx, r.leaf)
		return err
	})
	return fetched, versions, err
}

// readPath reads the stored levels of leaf's path in one backend call and
// opens every bucket; it returns their contents and versions.
func (s *store) readPath(ctx context.Context, leaf uint64) ([][]tree.Block, []uint64, error) {
	return s.readBuckets(ctx, s.geo.Path(leaf, nil)[s.opts.CachedLevels:])
}

// readBuckets reads buckets stored by writeBuckets in one backend call and
// opens each under the version stored beside it.
func (s *store) readBuckets(ctx context.Context, buckets []uint64) ([][]tree.Block, []uint64, error) {
	addrs := s.layout.Addrs(buckets, nil)
	vals, err := s.b.Read(ctx, addrs)
	if err != nil {
		return nil, nil, err
	}
	out, versions := make([][]tree.Block, len(vals)), make([]uint64, len(vals))
	for i, v := range vals {
		if v == nil {
			return nil, nil, fmt.Errorf("%w: a bucket is missing", kv.ErrTampered)
		}
		var data []byte
		if versions[i], data, err = backend.SplitVersioned(v); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", kv.ErrTampered, err)
		}
		if out[i], err = s.codec.DecodeBucket(addrs[i], versions[i], data); err != nil {
			return nil, nil, err
		}
	}
	return out, versions, nil
}

// checkFresh rejects a path whose buckets, where the subtree does not
// hold them (so the stored copy will be used), are older than storage
// acknowledged: an authentic but replayed bucket. A bucket the subtree
// holds may legitimately come back older, when a write-back landed while
// the read was in flight; its stored copy is ignored.
func (s *store) checkFresh(leaf uint64, versions []uint64) error {
	for i, v := range versions {
		b := s.geo.BucketAt(leaf, s.opts.CachedLevels+i)
		if _, held := s.sub.nodes[b]; !held && v < s.acked[b] {
			return fmt.Errorf("%w: storage served an old version of a bucket (replay)", kv.ErrTampered)
		}
	}
	return nil
}

// pathReturned handles the return of r's path: sync, answer, flush,
// maybe write back (ANSWER-REQUEST, FLUSH), journal what changed, and
// release the replies that are complete. A reply whose record is not yet
// durable leaves when the committer has synced it (syncGroup): the
// records of concurrent paths share fsyncs. A stopped store processes no
// more paths: a read storage served stays unfinished, for recovery.
func (s *store) pathReturned(r *request, fetched [][]tree.Block, versions []uint64, err error) {
	s.mu.Lock()
	err = cmp.Or(s.broken, err)
	s.process(r, fetched, versions, err)
	s.seq.release()
	if s.opts.TestingKnobs.Handled != nil {
		s.opts.TestingKnobs.Handled(r.arrival)
	}
	due := s.broken == nil && s.log.Due()
	s.mu.Unlock()
	if due && s.checkpointing.TryLock() {
		// In the background: a checkpoint waits for the write-backs in
		// flight, which under load takes seconds, and no request should.
		go func() {
			defer s.checkpointing.Unlock()
			if err := s.checkpointLocked(context.Background()); err != nil {
				s.mu.Lock()
				s.stop(err)
				s.mu.Unlock()
			}
		}()
	}
}

// process applies r's returned path to the state, journals the change
// and returns its record's LSN (0 when nothing changed); s.mu is held.
func (s *store) process(r *request, fetched [][]tree.Block, versions []uint64, err error) uint64 {
	if err == nil {
		err = s.checkFresh(r.leaf, versions)
	}
	s.sub.returned(r.leaf)
	r.pathDone = true
	if err != nil {
		s.failed(r, err)
		return 0
	}
	if s.opts.TestingKnobs.Leak == leakUnchangedNotWritten {
		s.rememberFetched(r.leaf, fetched)
	}
	delete(s.unfinished, r.plan)
	s.sub.sync(r.leaf, s.opts.CachedLevels, fetched)
	var answered []*request
	named := false
	if r.real {
		answered = s.reqs[r.id]
		named = s.answer(r)
	}
	s.flush(r.leaf)
	lsn := s.journal(s.pathDelta(r.leaf, r.real, r.id, r.plan, named))
	for _, q := range answered {
		q.lsn = max(q.lsn, lsn)
	}
	r.lsn = max(r.lsn, lsn)
	s.flushed = append(s.flushed, r.leaf)
	if len(s.flushed) >= s.opts.K || s.opts.TestingKnobs.Leak == leakPutWritesBack && r.m.Op == kv.MutSet {
		s.startWriteBack(s.flushed)
		s.flushed = nil
	}
	return lsn
}

// stop stops the store after a journal failure: nothing acknowledged is
// lost, but what is not yet durable must not be acknowledged, and nothing
// more is served; s.mu is held.
func (s *store) stop(err error) {
	s.broken = err
	for _, q := range s.seq.queue {
		q.err, q.answered, q.lsn = err, true, 0
	}
	s.releasePlans()
}

// failed answers r with err; if r was its block's real read, every request
// queued behind it fails too, and none of them took effect.
func (s *store) failed(r *request, err error) {
	if !r.real {
		if !r.answered {
			r.err, r.answered = err, true
		}
		return
	}
	for _, q := range s.reqs[r.id] {
		q.err, q.answered = err, true
	}
	delete(s.reqs, r.id)
}

// answer runs, in arrival order, every request queued on r's block now
// that its real path is in the subtree, then remaps the block to a fresh
// random leaf in the stash (ANSWER-REQUEST). It reports whether it kept
// the block's name: a request stored the block, whose name the state did
// not hold.
func (s *store) answer(r *request) (named bool) {
	val, exists, err := s.take(r.id, r.leaf)
	if err != nil {
		s.failed(r, err)
		return false
	}
	others := len(s.pos)
	if _, ok := s.pos[r.id]; ok {
		others--
	}
	var writer *request
	for _, q := range s.reqs[r.id] {
		if exists, val = q.apply(exists, val, others, s.capacity, s.valueSize); q.result.Written {
			writer = q
		}
	}
	delete(s.reqs, r.id)
	if !exists {
		delete(s.pos, r.id)
		delete(s.names, r.id)
		return false
	}
	if _, ok := s.names[r.id]; writer != nil && !ok {
		s.names[r.id], named = writer.key, true
	}
	s.pos[r.id] = s.randomLeaf()
	if s.opts.TestingKnobs.Leak == leakGetKeepsLeaf && r.m.Op == kv.MutRead {
		s.pos[r.id] = r.leaf
	}
	if s.opts.TestingKnobs.Leak == leakKeyedRemap || s.opts.TestingKnobs.Leak == leakChainedRemap {
		s.pos[r.id] = s.leakedRemap(r.id, r.leaf)
	}
	s.stash[r.id] = val
	return named
}

// take removes block id from the stash or from leaf's path in the subtree.
// A block the position map places on the path but the path does not hold
// means storage served an old bucket that still authenticates (a replay).
func (s *store) take(id tree.BlockID, leaf uint64) ([]byte, bool, error) {
	if v, ok := s.stash[id]; ok {
		delete(s.stash, id)
		return v, true, nil
	}
	if _, ok := s.pos[id]; !ok {
		return nil, false, nil
	}
	s.nodeBuf = s.sub.pathNodes(leaf, s.nodeBuf)
	for _, n := range s.nodeBuf {
		for i, blk := range n.blocks {
			if blk.ID == id {
				n.blocks = slices.Delete(n.blocks, i, i+1)
				return blk.Value, true, nil
			}
		}
	}
	return nil, false, fmt.Errorf("%w: a block is missing from its path (replayed bucket?)", kv.ErrTampered)
}
