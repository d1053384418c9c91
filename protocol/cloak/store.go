package cloak

import (
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
		Name:    protocolName,
		Summary: "Cloak: fixed-size batches at a fixed rate, shaped to a fixed temporal access distribution; defeats injected queries",
		Open:    kv.FactoryOf(open),
		Options: Options{},
		Audit:   auditSpec,
		Reseal:  newResealer,
	})
}

// protocolName is the name Cloak is registered under.
const protocolName = "cloak"

// AddrPrefix begins the storage address of every physical address; its
// index follows as 4 big-endian bytes.
const AddrPrefix = "ck/p/"

// slot is the proxy's record of one physical address (the position map of
// Sec. 4, both directions, with the last batch id).
type slot struct {
	key       string
	held      bool   // the address holds key (or is reserved for its insert)
	lastBatch uint64 // the batch that last wrote it: its set
	clientTS  uint64 // when a client last asked for key (Sec. 4.2)
	inflight  bool   // the address is in the batch in flight
}

// value is a logical value; absent marks a deleted key. lsn is the
// journal record of the client write that made it (0 for a value read
// from storage or recovered): whoever answers a client with the value
// first waits until that record is durable (syncTo), so no client sees a
// write a crash could still undo.
type value struct {
	val    []byte
	absent bool
	lsn    uint64
}

// entry is one key with requests waiting for a batch (Algorithm 2's
// query_map, by logical key: a key's address changes only when a batch
// that holds it commits).
type entry struct {
	write    *value        // the latest write not yet in a batch
	sent     *value        // the batch in flight's value of the key: its write, or once read, its element
	reads    []chan result // answered by the next write, or the batch that holds the key
	inflight bool          // the key's address is in the batch in flight
}

type result struct {
	val   []byte
	found bool
	err   error
	lsn   uint64 // the answering write's journal record (value.lsn)
}

type counters struct {
	Batches, RealQueries, DummyQueries, CacheHits, Coalesced, FromPendingWrite, Backpressure, FailedBatches, FailedCheckpoints uint64
}

type store struct {
	b         backend.Backend
	keys      *seal.Keys
	opts      Options
	budgets   []int
	capacity  int
	valueSize int
	log       *durable.Log
	// checkpointEvery is how many batches run between checkpoints
	// (CheckpointBatches); the count is of batches, which storage sees,
	// never of client writes, which it must not (journal.go).
	checkpointEvery int

	batchMu sync.Mutex // held by a whole batch, and by Load

	mu        sync.Mutex    // guards everything below
	committed chan struct{} // closed and replaced when a batch commits
	rng       *rand.Rand
	next      uint64              // id of the next batch
	slots     []slot              // by physical address
	where     map[string]uint32   // key -> physical address
	sets      map[uint64][]uint32 // last batch id -> addresses not read since
	queues    map[uint64][]string // last batch id -> keys waiting, in arrival order
	pending   map[string]*entry
	free      []uint32 // addresses that hold no key
	live      int      // keys that exist
	clock     uint64   // client accesses so far (Sec. 4.2's timestamps)
	cache     *lru
	retry     *batch   // a batch whose backend calls failed, run again next
	scratch   []uint32 // takeDummies' candidates, reused
	counters  counters
	// sinceCheckpoint counts the batches committed since the last
	// checkpoint.
	sinceCheckpoint int
	// loadCut: a record replayed began a bulk load, never checkpointed
	// (recover writes the layout afresh).
	loadCut bool
	// broken, once set, fails every request: the journal failed, or a bulk
	// load left storage matching no state, and the proxy's state can no
	// longer be made durable.
	broken error

	sched          clockwork.Clock // the clock the batches' ticker runs on
	ticks          atomic.Uint64   // ticks the loop has handled
	stop, loopDone chan struct{}
	started        sync.Once     // the loop started (Start), or Close ended it unstarted
	early          chan struct{} // leakEarlyWhenFull only: a batch now
}

func open(ctx context.Context, env kv.Env) (*store, error) {
	opts, err := kv.ResolveOptions[Options]("cloak", env)
	if err != nil {
		return nil, err
	}
	if opts.TestingKnobs.Leak, err = envLeak(opts.TestingKnobs.Leak); err != nil { // a leak only in oblivkv_leaks builds (leak.go)
		return nil, err
	}
	budgets := Budgets(env.Capacity, opts.B1, opts.S)
	seed, err := random.Root(opts.TestingKnobs.Seed)
	if err != nil {
		return nil, fmt.Errorf("cloak: %w", err)
	}
	if opts.TestingKnobs.Leak == leakFixedSeed {
		seed = random.Seed{}
	}
	s := &store{b: env.Backend, keys: env.Keys, opts: opts, budgets: budgets, capacity: env.Capacity, valueSize: env.ValueSize,
		log: durable.New(env.Journal, env.Backend, env.Keys), checkpointEvery: CheckpointBatches,
		committed: make(chan struct{}), rng: rand.New(random.New(seed)), cache: newLRU(opts.Cache),
		pending: map[string]*entry{}, queues: map[uint64][]string{}, sched: cmp.Or(opts.TestingKnobs.Clock, clockwork.NewRealClock()),
		stop: make(chan struct{}), loopDone: make(chan struct{})}
	if opts.TestingKnobs.Leak == leakEarlyWhenFull {
		s.early = make(chan struct{}, 1)
	}
	if env.Fresh {
		// The initial layout, then the journal's first checkpoint.
		var st []byte
		err = s.layout(ctx, nil)
		if err == nil {
			st, err = s.Snapshot()
		}
		if err == nil {
			err = s.log.Create(ctx, st)
		}
	} else {
		err = s.recover(ctx)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Start implements kv.Starter: batches start once the store is committed,
// so a creation cut short before its metadata is written leaves no batch
// in the journal, and the next start builds the store afresh. The ticker
// is set before Start returns, so a fake clock advanced from then on
// ticks it.
func (s *store) Start() {
	s.started.Do(func() {
		t := s.sched.NewTicker(s.opts.Delta)
		go s.loop(t)
	})
}

// addr is the storage address of physical address a.
func addr(a uint32) string {
	return AddrPrefix + string(binary.BigEndian.AppendUint32(nil, a))
}

// ad binds a sealed element to its address and the batch that wrote it,
// the batch id the position map keeps for every physical address (Cloak
// Sec. 4.1 and Table 1): storage can neither move an element to another
// address nor put back an older element at its own (seal.ErrTampered).
func (s *store) ad(a uint32, batchID uint64) []byte {
	if s.opts.TestingKnobs.Leak == leakUnversionedSeal {
		batchID = 0
	}
	return binary.BigEndian.AppendUint64([]byte(addr(a)), batchID)
}

// sealElement seals the element of address a written by batch id: a
// 4-byte length (all ones for an address that holds no key) and the value
// padded to the value size. plain is a scratch buffer of 4+valueSize
// bytes, so a batch encodes every element in one buffer.
func (s *store) sealElement(a uint32, id uint64, v value, plain []byte) []byte {
	n := uint32(len(v.val))
	if v.absent {
		n = ^uint32(0)
	}
	binary.BigEndian.PutUint32(plain, n)
	clear(plain[4+copy(plain[4:], v.val):])
	return s.keys.Seal(nil, s.ad(a, id), plain)
}

func (s *store) openElement(a uint32, id uint64, sealed []byte) (value, error) {
	if sealed == nil {
		return value{}, fmt.Errorf("%w: address %d is missing", kv.ErrTampered, a)
	}
	plain, err := s.keys.Open(nil, s.ad(a, id), sealed)
	if err != nil {
		return value{}, fmt.Errorf("cloak: address %d: %w", a, err)
	}
	if len(plain) != 4+s.valueSize {
		return value{}, fmt.Errorf("%w: address %d has the wrong size", kv.ErrTampered, a)
	}
	n := binary.BigEndian.Uint32(plain)
	switch {
	case n == ^uint32(0):
		return value{absent: true}, nil
	case int(n) > s.valueSize:
		return value{}, fmt.Errorf("%w: address %d has a bad length", kv.ErrTampered, a)
	}
	return value{val: plain[4 : 4+n : 4+n]}, nil
}

// lru is the proxy's cache of recent values (Sec. 4: "a configurable fixed
// size cache with any eviction policy"): least recently used goes first.
type lru struct {
	size  int
	order *list.List // of cacheEntry, most recent first
	at    map[string]*list.Element
}

type cacheEntry struct {
	key string
	v   value
}

func newLRU(size int) *lru {
	return &lru{size: size, order: list.New(), at: map[string]*list.Element{}}
}

func (c *lru) get(key string) (value, bool) {
	e, ok := c.at[key]
	if !ok {
		return value{}, false
	}
	c.order.MoveToFront(e)
	return e.Value.(cacheEntry).v, true
}

func (c *lru) put(key string, v value) {
	if c.size == 0 {
		return
	}
	if e, ok := c.at[key]; ok {
		e.Value = cacheEntry{key: key, v: v}
		c.order.MoveToFront(e)
		return
	}
	c.at[key] = c.order.PushFront(cacheEntry{key: key, v: v})
	if c.order.Len() > c.size {
		last := c.order.Back()
		delete(c.at, c.order.Remove(last).(cacheEntry).key)
	}
}

func (c *lru) reset() { c.order.Init(); clear(c.at) }

// loop sends a batch every Delta, at each tick of t, until Close (Sec.
// 4: batches leave at a fixed rate, so their timing carries nothing). A
// batch that takes longer than Delta delays the next; ticks are not
// queued up.
func (s *store) loop(t clockwork.Ticker) {
	defer close(s.loopDone)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.Chan():
			s.tick()
			s.ticks.Add(1)
		case <-s.early:
			s.runBatch(context.Background())
		}
	}
}

// tick sends the batch of one tick, busy or idle.
func (s *store) tick() {
	if s.opts.TestingKnobs.Leak == leakSkipIdle && s.idle() {
		return
	}
	s.runBatch(context.Background())
}
