package waffle

import (
	"bytes"
	"cmp"
	"container/list"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/random"
	"github.com/oblivkv/oblivkv/seal"
)

func init() {
	kv.Register(kv.Protocol{
		Name:    "waffle",
		Summary: "Waffle: fixed batches of real and fake queries with bounded alpha and beta; defeats a passive persistent adversary",
		Open:    kv.FactoryOf(open),
		Options: Options{},
		Audit:   auditSpec,
		Reseal:  newResealer,
	})
}

// ObjectPrefix begins the storage address of every object; the PRF output
// follows it as raw bytes.
const ObjectPrefix = "wf/o/"

// PRF domains of real and dummy objects' storage ids.
var (
	domainReal  = []byte("waffle/real")
	domainDummy = []byte("waffle/dummy")
)

func errFull(capacity int) error { return fmt.Errorf("%w: %d keys", kv.ErrFull, capacity) }

type request struct {
	m      kv.Mutation // what it does to its key (its Arg the caller's copy)
	key    string
	done   chan struct{}
	result kv.Result
	err    error
}

// object is the proxy's record of one real or dummy object.
type object struct {
	ts    uint64        // address timestamp: on storage at prf(ref, ts)
	order uint64        // timestamp ordering the fake picks (a dummy's is reset)
	tie   uint64        // tie-break among equal orders: see store.commit
	elem  *list.Element // non-nil while the object is in the cache
}

// cached is one cache entry; dummies carry no value.
type cached struct {
	ref ref
	val []byte
}

// counters are the protocol's statistics.
type counters struct {
	Batches, RealQueries, FakeReal, FakeDummy, DeleteErrors uint64
}

type store struct {
	kv.ByUpdate // Get, Put and Delete: Updates of the store itself

	b         backend.Backend
	keys      *seal.Keys
	opts      Options
	capacity  int
	valueSize int
	log       *durable.Log // the write-ahead journal (state.go)

	reqs     chan *request
	stop     chan struct{}
	loopDone chan struct{}
	sched    clockwork.Clock // the clock a batch's Timeout runs on

	stats atomic.Pointer[snapshot] // Stats' copy of the counters (publish)
	// checkpointErrors counts checkpoints that failed (each is tried again
	// after the next batch, the journal kept whole meanwhile).
	checkpointErrors atomic.Uint64

	mu        sync.Mutex // guards everything below; held by a batch and those chained to it
	rng       *rand.Rand
	ts        uint64 // global timestamp: batches (and bulk loads) so far
	lastReset uint64 // ts of the last reset of the dummies' timestamps
	objs      map[ref]*object
	cache     *list.List // of *cached, most recently used first
	reals     index      // real objects on storage
	dummies   index      // dummy objects on storage
	nReal     int
	counters  counters
	plain     []byte // seal's plaintext buffer

	// unread is a batch whose reads were journaled and not committed (its
	// Read failed, or the proxy crashed): it is run again, on exactly
	// those reads, before anything else reaches storage (store.catchUp).
	unread *intent
	// unwritten is a committed batch whose Write failed: it is retried
	// before anything else reaches storage, so storage never falls
	// behind the proxy.
	unwritten *writeBack
	// broken, once set, fails every later batch: the journal failed, so
	// the proxy's state can no longer be made durable.
	broken error
	// garbage is the previous layout's addresses while a bulk load has not
	// deleted them (state.Garbage).
	garbage []string
}

func open(ctx context.Context, env kv.Env) (*store, error) {
	opts, err := kv.ResolveOptions[Options]("waffle", env)
	if err != nil {
		return nil, err
	}
	if opts.TestingKnobs.Leak, err = envLeak(opts.TestingKnobs.Leak); err != nil { // a leak only in oblivkv_leaks builds (leak.go)
		return nil, err
	}
	seed, err := random.Root(opts.TestingKnobs.Seed)
	if err != nil {
		return nil, fmt.Errorf("waffle: %w", err)
	}
	if opts.TestingKnobs.Leak == leakFixedSeed {
		seed = random.Seed{}
	}
	s := &store{b: env.Backend, keys: env.Keys, opts: opts, capacity: env.Capacity, valueSize: env.ValueSize,
		log:  durable.New(env.Journal, env.Backend, env.Keys),
		reqs: make(chan *request), stop: make(chan struct{}), loopDone: make(chan struct{}),
		sched: cmp.Or(opts.TestingKnobs.Clock, clockwork.NewRealClock()),
		rng:   rand.New(random.New(seed)), objs: map[ref]*object{}, cache: list.New(),
		plain: make([]byte, 4+env.ValueSize)}
	s.ByUpdate = kv.ByUpdate{Updater: s}
	if env.Fresh {
		// The initial layout, then the journal's first checkpoint.
		err = s.writeInitial(ctx)
		var st []byte
		if err == nil && s.log.Durable() {
			if st, err = s.Snapshot(); err == nil {
				err = s.log.Create(ctx, st)
			}
		}
	} else {
		err = s.recover(ctx)
	}
	if err != nil {
		return nil, err
	}
	s.publish()
	go s.loop()
	return s, nil
}

// addr is the storage id of object rf written at timestamp ts:
// prf(domain, key, ts) (objectAddr).
func (s *store) addr(rf ref, ts uint64) string {
	if s.opts.TestingKnobs.Leak == leakKeyedIDPrefix {
		return keyedIDPrefix(s.keys.CurrentPRF(domainOf(rf), []byte(rf.Key)), ts)
	}
	return objectAddr(s.keys, rf, ts)
}

// objectAddr is the storage id of object rf written at timestamp ts under
// keys: prf(domain, key, ts), with the master key's own PRF, so a rekey
// moves every object to an address a leaked old key does not link to it.
func objectAddr(keys *seal.Keys, rf ref, ts uint64) string {
	id := keys.CurrentPRF(domainOf(rf), []byte(rf.Key), binary.BigEndian.AppendUint64(nil, ts))
	return ObjectPrefix + string(id[:])
}

// domainOf separates the ids of real objects from the dummies'.
func domainOf(rf ref) []byte {
	if rf.Dummy {
		return domainDummy
	}
	return domainReal
}

// item is object rf with value val (nil for a dummy) sealed for storage
// at timestamp ts.
func (s *store) item(rf ref, ts uint64, val []byte) backend.Item {
	a := s.addr(rf, ts)
	return backend.Item{Addr: a, Value: s.seal(a, val)}
}

// seal encodes val padded to the value size and seals it bound to its
// address. It reuses s.plain, so it runs under mu (or before the store is
// shared).
func (s *store) seal(addr string, val []byte) []byte {
	binary.BigEndian.PutUint32(s.plain, uint32(len(val)))
	n := copy(s.plain[4:], val)
	clear(s.plain[4+n:])
	return s.keys.Seal(nil, []byte(addr), s.plain)
}

// unseal opens the object read at addr and returns its value.
func (s *store) unseal(addr string, sealed []byte) ([]byte, error) {
	if sealed == nil {
		return nil, fmt.Errorf("%w: object %q is missing", kv.ErrTampered, addr)
	}
	plain, err := s.keys.Open(nil, []byte(addr), sealed)
	if err != nil {
		return nil, fmt.Errorf("object %q: %w", addr, err)
	}
	if len(plain) != 4+s.valueSize {
		return nil, fmt.Errorf("%w: object %q has the wrong size", kv.ErrTampered, addr)
	}
	n := binary.BigEndian.Uint32(plain)
	if int(n) > s.valueSize {
		return nil, fmt.Errorf("%w: object %q has a bad length", kv.ErrTampered, addr)
	}
	return plain[4 : 4+n : 4+n], nil
}

// newDummy returns a dummy with a random id not in objs: the paper's
// "D random dummy keys" (Sec. 6.1), whose order is the order in which
// dummies are picked after a reset (see store.resetDummies).
func newDummy(rng *rand.Rand, objs map[ref]*object) ref {
	for {
		var id [8]byte
		binary.BigEndian.PutUint64(id[:], rng.Uint64())
		if rf := (ref{Dummy: true, Key: string(id[:])}); !hasRef(objs, rf) {
			return rf
		}
	}
}

func hasRef(objs map[ref]*object, rf ref) bool {
	_, ok := objs[rf]
	return ok
}

// Update implements kv.Updater: the mutation is one request of a batch,
// run on the key's value when the batch has it, as a Get is.
func (s *store) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	m.Arg = bytes.Clone(m.Arg)
	r, err := s.access(ctx, m, key)
	if err != nil {
		return kv.Result{}, err
	}
	return r.result, r.err
}

// access queues one request for the next batch and waits for its answer.
// A request already queued runs even if the caller gives up.
func (s *store) access(ctx context.Context, m kv.Mutation, key string) (*request, error) {
	r := &request{m: m, key: key, done: make(chan struct{})}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-r.done:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// loop forms batches and serves them, one at a time.
func (s *store) loop() {
	defer close(s.loopDone)
	buf := make([]*request, 0, s.opts.R)
	var batch []*request // requests received for the next batch
	for {
		if len(batch) == 0 {
			select {
			case <-s.stop:
				return
			case r := <-s.reqs:
				batch = append(buf[:0], r)
			}
		}
		batch = s.serve(s.gather(batch))
	}
}

// gather adds requests to batch, which holds the first, until R wait or
// Timeout passed since the first arrived.
func (s *store) gather(batch []*request) []*request {
	timer := s.sched.NewTimer(s.opts.Timeout)
	defer timer.Stop()
	for len(batch) < s.opts.R {
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		case <-timer.Chan():
			return batch
		}
	}
	return batch
}

// serve runs batch, and the batches chained after it (store.run),
// answering the requests of each; a failed batch fails them all. It
// returns the requests received for the batch after them. When enough
// records have been journaled since the last checkpoint (a count, so
// storage learns nothing from when it happens), a checkpoint follows the
// answers.
func (s *store) serve(batch []*request) []*request {
	ctx := context.Background()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.catchUp(ctx)
	var p *prepared
	if err == nil {
		p, err = s.prepare(batch)
	}
	if err != nil {
		answer(batch, err)
		return nil
	}
	var carry []*request
	for p != nil {
		var next *prepared
		next, carry, err = s.run(ctx, p, true)
		answer(p.reqs, err)
		p = next
	}
	if s.log.Due() && s.caughtUp() {
		// A checkpoint that fails (storage or the journal's disk
		// unavailable) leaves the journal whole; it is tried again after
		// the next batch.
		if s.checkpoint(ctx) != nil {
			s.checkpointErrors.Add(1)
		}
	}
	return carry
}

// answer answers reqs, with err when it is not nil.
func answer(reqs []*request, err error) {
	for _, r := range reqs {
		if err != nil {
			r.err = err
		}
		close(r.done)
	}
}

// snapshot is what Stats reports of the proxy's state.
type snapshot struct {
	keys, realCached int
	counters         counters
}

// publish makes the state's counters Stats' (s.mu is held, or s is not
// shared yet), so that Stats never waits for a batch.
func (s *store) publish() {
	realCached := 0
	for e := s.cache.Front(); e != nil; e = e.Next() {
		if !e.Value.(*cached).ref.Dummy {
			realCached++
		}
	}
	s.stats.Store(&snapshot{keys: s.nReal, realCached: realCached, counters: s.counters})
}

// JournalsEveryWrite implements kv.WriteJournaler: every backend write
// is journaled, with its data, before it is issued.
func (s *store) JournalsEveryWrite() bool { return s.log.Durable() }

func (s *store) Stats() kv.Stats {
	st := s.stats.Load()
	c := st.counters
	return kv.Stats{Keys: int64(st.keys), Extra: []kv.Stat{
		{Name: kv.StatWaffleB, Value: float64(s.opts.B)},
		{Name: kv.StatWaffleR, Value: float64(s.opts.R)},
		{Name: kv.StatWaffleFD, Value: float64(s.opts.FD)},
		{Name: kv.StatWaffleD, Value: float64(s.opts.D)},
		{Name: kv.StatWaffleC, Value: float64(s.opts.C)},
		{Name: kv.StatBatches, Value: float64(c.Batches)},
		{Name: kv.StatCacheSize, Value: float64(st.realCached)},
		{Name: kv.StatRealQueries, Value: float64(c.RealQueries)},
		{Name: kv.StatFakeReal, Value: float64(c.FakeReal)},
		{Name: kv.StatFakeDummy, Value: float64(c.FakeDummy)},
		{Name: kv.StatDeleteErrors, Value: float64(c.DeleteErrors)},
		{Name: kv.StatCheckpointErrors, Value: float64(s.checkpointErrors.Load())},
		{Name: kv.StatTheoreticalAlpha, Value: TheoreticalAlpha(s.opts, s.capacity)},
		{Name: kv.StatTheoreticalBeta, Value: TheoreticalBeta(s.opts, s.capacity)},
	}}
}

// StoredKeys implements kv.KeyLister from the objects' map: every real
// object, on storage or in the cache.
func (s *store) StoredKeys(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, s.nReal)
	for rf := range s.objs {
		if !rf.Dummy {
			keys = append(keys, rf.Key)
		}
	}
	return keys, nil
}
