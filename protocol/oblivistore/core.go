package oblivistore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
)

// OpKind is a client operation.
type OpKind uint8

// The client operations.
const (
	OpGet OpKind = iota
	OpPut
	OpDelete
)

// Slot names one storage slot: partition, level and slot within the level.
type Slot struct {
	P int32
	L int8
	S int32
}

// Block is the content of one slot: a real block's value, or a dummy.
type Block struct {
	Real bool
	Val  []byte
}

// Input is one input of the core; exactly one field is set. The driver
// journals every input before any output it causes leaves the process.
type Input struct {
	Request *Request
	Read    *ReadDone
	Write   *WriteDone
	// Reseed mixes fresh randomness into the core's source. The driver
	// journals one at every open, so work lost in a crash is never redone
	// with the same random choices.
	Reseed *[32]byte
}

// Request is a client operation's arrival.
type Request struct {
	Op  OpKind
	Key string
	Val []byte
}

// ReadDone is the result of a ReadIO: Blocks[i] is the content of Slots[i].
type ReadDone struct {
	ID     uint64
	Blocks []Block
}

// WriteDone reports a WriteIO applied.
type WriteDone struct{ ID uint64 }

// Output is one output of the core; exactly one field is set.
type Output struct {
	Read  *ReadIO
	Write *WriteIO
	Reply *Reply
}

// ReadIO asks the driver to read Slots, each sealed under its level's
// nonce.
type ReadIO struct {
	ID     uint64
	Slots  []Slot
	Nonces []uint64
}

// WriteIO asks the driver to write Blocks to Slots in one atomic call.
type WriteIO struct {
	ID     uint64
	Slots  []Slot
	Nonces []uint64
	Blocks []Block
}

// Reply answers the request that arrived Seq-th (from 1).
type Reply struct {
	Seq   uint64
	Val   []byte
	Found bool
	Full  bool // a Put of a new key into a full store
}

// ErrTampered is returned by Step when a slot's content contradicts the
// trusted state (a dummy where a real block was written, or the reverse).
var ErrTampered = kv.ErrTampered

// Where a key's block is.
const (
	inLevel  uint8 = iota // in slot (P, L, S) on storage, unread
	inMemory              // in trusted memory (Held), assigned partition P
	staged                // shuffled into slot (P, L, S), being written
)

// Loc is where a key's block is.
type Loc struct {
	P     int32
	L     int8
	S     int32
	Where uint8
}

func (l Loc) slot() Slot { return Slot{P: l.P, L: l.L, S: l.S} }

// Held is a block in trusted memory: being accessed, or in the eviction
// cache of its assigned partition.
type Held struct {
	Part   int32 // assigned partition
	Val    []byte
	Known  bool // Val and Exists are the key's latest
	Exists bool
	Refs   int32 // admitted requests on the key not yet answered
	Src    Slot  // while !Known: the slot whose read brings the value
	// Queued is the partition whose eviction queue holds the key, or -1.
	Queued int32
}

// Req is an admitted or waiting request.
type Req struct {
	Seq       uint64
	Op        OpKind
	Key       string
	Val       []byte
	Evictions int32 // evictions it schedules (nu, drawn at arrival)
	ReadID    uint64
	ReadDone  bool
	HasKey    bool // holds a reference on Mem[Key]
	Full      bool
}

// Semaphores are the four semaphores of Sec. V-D. Every change depends only
// on what storage sees or on request arrivals (Invariant 1).
type Semaphores struct {
	Early, Buffer, Evictions, IO int64
}

// Counters are the core's statistics.
type Counters struct {
	RealReads, DummyReads, EarlyReads, ShuffleReads, ShuffleWrites uint64
	Shuffles, Evicted, DummyEvictions                              uint64
	MaxEvictionCache, MaxBuffer                                    int64
}

// State is the core's whole state: plain data, so Snapshot can encode it.
type State struct {
	Geo      geometry
	Opts     coreOptions
	Capacity int
	// Pub and Sec are the random sources' states, in a snapshot only.
	Pub, Sec  []byte
	Pos       map[string]Loc
	Mem       map[string]*Held
	Queues    [][]string // per partition: the eviction cache, oldest first
	Parts     []Partition
	Jobs      []*Job // shuffles in progress, in start order
	Waiting   []*Req // arrived, not admitted
	Active    []*Req // admitted, not answered, in arrival order
	Reads     map[uint64]*ReadIO
	ReadOwner map[uint64]uint64 // read ID -> request Seq, or 0 for a job's
	Writes    map[uint64]*WriteIO
	NextID    uint64
	NextSeq   uint64
	Sem       Semaphores
	Keys      int // keys stored or being created
	Cursor    int32
	Counters  Counters
}

// coreOptions are the options the core acts on (Options with defaults),
// kept in its state so a store reopens only with the options it was made
// with.
type coreOptions struct {
	EvictionRate       float64
	EarlyCacheIns      int64
	ShufflingBuffer    int64
	EvictionsAhead     int64
	ShuffleIOPerAccess int64
	ShuffleIOAhead     int64
	Leak               leak
}

func coreOptionsOf(o Options) coreOptions {
	return coreOptions{EvictionRate: o.EvictionRate, EarlyCacheIns: int64(o.EarlyCacheIns),
		ShufflingBuffer: int64(o.ShufflingBuffer), EvictionsAhead: int64(o.EvictionsAhead),
		ShuffleIOPerAccess: int64(o.ShuffleIOPerAccess), ShuffleIOAhead: int64(o.ShuffleIOAhead), Leak: o.leak}
}

// Core is ObliviStore's trusted state machine (Figs. 5-7): a
// deterministic function of its state and inputs. It never does I/O,
// reads a clock or spawns anything.
//
// It draws from two random sources. pub makes the choices storage may
// learn, and draws the same amount per access whatever the workload: the
// evictions each access schedules and their partitions, and the partition
// an access to a key not on storage reads. sec makes the secret ones: the
// partition a block is assigned to, and every level's layout. Two
// workloads of equal length then see the same public coins.
type Core struct {
	st       State
	pubSrc   *rand.ChaCha8
	secSrc   *rand.ChaCha8
	pub, sec *rand.Rand
	out      []Output
	// readIssued is Options.readIssued (tests only).
	readIssued func(p int32, slots []Slot, request bool)
	// forced, tests only, replaces the partitions that accesses to keys
	// not on storage read, in order: a simulator replays the partitions
	// storage saw (export_test.go).
	forced []int32
}

// NewCore returns the core of an empty store of capacity n.
func NewCore(n int, o Options, seed [32]byte) *Core {
	g := o.geometry(n)
	c := &Core{st: State{
		Geo:      g,
		Opts:     coreOptionsOf(o),
		Capacity: n,
		Pos:      map[string]Loc{},
		Mem:      map[string]*Held{},
		Queues:   make([][]string, g.Partitions),
		Parts:    make([]Partition, g.Partitions),
		Reads:    map[uint64]*ReadIO{}, ReadOwner: map[uint64]uint64{},
		Writes: map[uint64]*WriteIO{},
		Sem: Semaphores{Early: int64(o.EarlyCacheIns), Buffer: int64(o.ShufflingBuffer),
			Evictions: int64(o.EvictionsAhead), IO: int64(o.ShuffleIOAhead)},
	}}
	for i := range c.st.Parts {
		c.st.Parts[i].Levels = make([]Level, g.Top+1)
	}
	c.seed(seed)
	c.readIssued = o.readIssued
	return c
}

// seed derives both sources from seed.
func (c *Core) seed(seed [32]byte) {
	c.pubSrc = rand.NewChaCha8(sha256.Sum256(append([]byte("oblivistore/pub"), seed[:]...)))
	c.secSrc = rand.NewChaCha8(sha256.Sum256(append([]byte("oblivistore/sec"), seed[:]...)))
	c.pub, c.sec = rand.New(c.pubSrc), rand.New(c.secSrc)
}

func (c *Core) levels() int64 { return int64(c.st.Geo.Top + 1) }

// Step applies one input and returns the outputs it causes, valid until
// the next call. An error leaves the core unusable: storage was tampered
// with, or an invariant broke.
func (c *Core) Step(in Input) ([]Output, error) {
	c.out = c.out[:0]
	var err error
	switch {
	case in.Request != nil:
		c.arrive(*in.Request)
	case in.Read != nil:
		err = c.readDone(*in.Read)
	case in.Write != nil:
		err = c.writeDone(*in.Write)
	case in.Reseed != nil:
		c.reseed(*in.Reseed)
	default:
		err = errors.New("oblivistore: empty input")
	}
	if err == nil {
		err = c.progress()
	}
	return c.out, err
}

// progress admits, answers and shuffles until nothing more can move.
func (c *Core) progress() error {
	for {
		moved := c.admit()
		moved = c.answer() || moved
		m, err := c.shuffle()
		if err != nil {
			return err
		}
		if !m && !moved {
			return nil
		}
	}
}

func (c *Core) reseed(seed [32]byte) {
	var mixed [32]byte
	c.secSrc.Read(mixed[:])
	for i := range mixed {
		mixed[i] ^= seed[i]
	}
	c.seed(mixed)
}

// NextSeq is the sequence number the next request will get.
func (c *Core) NextSeq() uint64 { return c.st.NextSeq + 1 }

// arrive queues a request; nu is drawn now, so the draw's place in the
// random sequence depends only on the order of arrivals.
func (c *Core) arrive(r Request) {
	c.st.NextSeq++
	nu := c.st.Opts.EvictionRate
	e := int32(nu)
	if frac := nu - math.Floor(nu); frac > 0 && c.pub.Float64() < frac {
		e++
	}
	c.st.Waiting = append(c.st.Waiting, &Req{Seq: c.st.NextSeq, Op: r.Op, Key: r.Key, Val: r.Val, Evictions: e})
}

// admissionBlocked reports whether a request waits on the early cache-in
// or the eviction semaphore (Fig. 5's first two steps).
func (c *Core) admissionBlocked() bool {
	if len(c.st.Waiting) == 0 {
		return false
	}
	r := c.st.Waiting[0]
	return c.st.Sem.Early < c.levels() || c.st.Sem.Evictions < int64(r.Evictions)
}

// admit starts the waiting requests the semaphores allow, in arrival
// order (Fig. 5).
func (c *Core) admit() bool {
	moved := false
	for len(c.st.Waiting) > 0 && !c.admissionBlocked() {
		r := c.st.Waiting[0]
		c.st.Waiting = c.st.Waiting[1:]
		c.st.Sem.Early -= c.levels()
		c.st.Sem.Evictions -= int64(r.Evictions)
		c.st.Sem.IO = min(c.st.Sem.IO+c.st.Opts.ShuffleIOPerAccess, c.st.Opts.ShuffleIOAhead)
		c.st.Active = append(c.st.Active, r)
		fake := int32(c.pub.IntN(c.st.Geo.Partitions))
		if len(c.forced) > 0 {
			fake, c.forced = c.forced[0], c.forced[1:]
		}
		p, target := c.locate(r, fake)
		c.readPartition(r, p, target)
		moved = true
	}
	return moved
}

// randomPart draws a block's secret partition.
func (c *Core) randomPart() int32 { return int32(c.sec.IntN(c.st.Geo.Partitions)) }

// locate returns the partition request r reads and, when its block is
// unread on storage, the block's slot; it moves the key's block to
// trusted memory under a fresh random partition (Sec. III-A). A key not
// on storage reads partition fake, drawn for every access.
func (c *Core) locate(r *Req, fake int32) (int32, *Slot) {
	loc, ok := c.st.Pos[r.Key]
	if !ok {
		p := fake
		if r.Op == OpPut {
			if c.st.Keys >= c.st.Capacity {
				r.Full = true
				return p, nil
			}
			c.st.Keys++
			c.hold(r, &Held{Known: true})
		}
		return p, nil
	}
	if loc.Where == inMemory {
		h := c.st.Mem[r.Key]
		p := h.Part
		var target *Slot
		if c.st.Opts.Leak == leakRepeatReadsReal && !h.Known {
			p, target = h.Src.P, &h.Src
		}
		h.Part = c.randomPart()
		h.Refs++
		r.HasKey = true
		return p, target
	}
	h := &Held{Src: loc.slot()}
	var target *Slot
	switch lv := c.level(loc.slot()); {
	case loc.Where == staged:
		h.Val, h.Known, h.Exists = c.job(loc.P).Staged[r.Key], true, true
		delete(c.job(loc.P).Staged, r.Key)
	case !lv.Read[loc.S]:
		t := loc.slot()
		target = &t
	case lv.Cached[loc.S] != nil:
		// Cached in early: read fake, answer from the storage cache
		// (Fig. 6, ReadReal).
		h.Val, h.Known, h.Exists = lv.Cached[loc.S], true, true
		delete(lv.Cached, loc.S)
	}
	c.hold(r, h)
	return loc.P, target
}

// hold puts the key's block in trusted memory under a fresh partition.
func (c *Core) hold(r *Req, h *Held) {
	h.Part, h.Refs, h.Queued = c.randomPart(), 1, -1
	c.st.Mem[r.Key] = h
	c.st.Pos[r.Key] = Loc{Where: inMemory}
	r.HasKey = true
}

func (c *Core) level(s Slot) *Level { return &c.st.Parts[s.P].Levels[s.L] }

func (c *Core) job(p int32) *Job {
	for _, j := range c.st.Jobs {
		if j.P == p {
			return j
		}
	}
	return nil
}

func (c *Core) newID() uint64 {
	c.st.NextID++
	return c.st.NextID
}

// emitRead issues a read of slots on behalf of request seq (0: a job).
func (c *Core) emitRead(slots []Slot, seq uint64) uint64 {
	io := &ReadIO{ID: c.newID(), Slots: slots, Nonces: make([]uint64, len(slots))}
	for i, s := range slots {
		lv := c.level(s)
		io.Nonces[i] = lv.Nonce
		lv.Inflight++
	}
	c.st.Reads[io.ID] = io
	c.st.ReadOwner[io.ID] = seq
	if c.readIssued != nil {
		c.readIssued(slots[0].P, slots, seq != 0)
	}
	c.out = append(c.out, Output{Read: io})
	return io.ID
}

// readDone routes a read's blocks: a real block goes to the request
// waiting for it, or to its level's storage cache.
func (c *Core) readDone(d ReadDone) error {
	io, ok := c.st.Reads[d.ID]
	if !ok {
		return fmt.Errorf("oblivistore: result of unknown read %d", d.ID)
	}
	if len(d.Blocks) != len(io.Slots) {
		return fmt.Errorf("%w: read %d returned %d blocks for %d slots", ErrTampered, d.ID, len(d.Blocks), len(io.Slots))
	}
	delete(c.st.Reads, d.ID)
	seq := c.st.ReadOwner[d.ID]
	delete(c.st.ReadOwner, d.ID)
	for i, s := range io.Slots {
		lv := c.level(s)
		lv.Inflight--
		if lv.Real[s.S] != d.Blocks[i].Real {
			return fmt.Errorf("%w: slot %v", ErrTampered, s)
		}
		if lv.Real[s.S] {
			c.route(s, lv.Keys[s.S], d.Blocks[i].Val)
		}
	}
	if seq != 0 {
		c.requestRead(seq)
	} else {
		for _, j := range c.st.Jobs {
			if j.ReadIDs[d.ID] {
				delete(j.ReadIDs, d.ID)
			}
		}
	}
	return nil
}

// route delivers a real block read from slot s.
func (c *Core) route(s Slot, key string, val []byte) {
	if loc, ok := c.st.Pos[key]; ok && loc.Where == inLevel && loc.slot() == s {
		lv := c.level(s)
		if lv.Cached == nil {
			lv.Cached = map[int32][]byte{}
		}
		lv.Cached[s.S] = val
		return
	}
	if h := c.st.Mem[key]; h != nil && !h.Known && h.Src == s {
		h.Val, h.Known, h.Exists = val, true, true
	}
}

// requestRead completes request seq's partition read and schedules its
// evictions at random partitions (Fig. 5, "on callback").
func (c *Core) requestRead(seq uint64) {
	for _, r := range c.st.Active {
		if r.Seq == seq {
			c.readFinished(r)
			return
		}
	}
}

func (c *Core) readFinished(r *Req) {
	r.ReadDone = true
	for range r.Evictions {
		c.st.Parts[c.pub.IntN(c.st.Geo.Partitions)].J++
	}
}

// answer replies to the oldest requests whose reads are done, in arrival
// order, applying each to its key's block.
func (c *Core) answer() bool {
	moved := false
	for len(c.st.Active) > 0 {
		r := c.st.Active[0]
		h := c.st.Mem[r.Key]
		if !r.ReadDone || (r.HasKey && r.Op == OpGet && !h.Known) {
			break
		}
		c.st.Active = c.st.Active[1:]
		c.apply(r, h)
		moved = true
	}
	return moved
}

func (c *Core) apply(r *Req, h *Held) {
	rep := &Reply{Seq: r.Seq, Full: r.Full}
	if r.HasKey {
		switch r.Op {
		case OpGet:
			rep.Found = h.Exists
			rep.Val = h.Val
		case OpPut:
			h.Val, h.Exists, h.Known = r.Val, true, true
		case OpDelete:
			h.Val, h.Exists, h.Known = nil, false, true
		}
		h.Refs--
		if h.Refs == 0 {
			c.settle(r.Key, h)
		}
	}
	c.out = append(c.out, Output{Reply: rep})
}

// settle puts an idle block in its partition's eviction cache, or forgets
// a deleted one.
func (c *Core) settle(key string, h *Held) {
	if !h.Exists {
		delete(c.st.Mem, key)
		delete(c.st.Pos, key)
		c.st.Keys--
		return
	}
	if h.Queued != h.Part {
		c.st.Queues[h.Part] = append(c.st.Queues[h.Part], key)
		h.Queued = h.Part
	}
	c.st.Counters.MaxEvictionCache = max(c.st.Counters.MaxEvictionCache, int64(len(c.st.Mem)))
}

// Idle reports whether no request is waiting or unanswered and no I/O is
// outstanding: the state a clean shutdown checkpoints.
func (c *Core) Idle() bool {
	return len(c.st.Waiting) == 0 && len(c.st.Active) == 0 && len(c.st.Reads) == 0 && len(c.st.Writes) == 0
}

// Outstanding returns the I/O issued and not completed, in issue order:
// what a driver reissues after restoring the core.
func (c *Core) Outstanding() []Output {
	ids := make([]uint64, 0, len(c.st.Reads)+len(c.st.Writes))
	for id := range c.st.Reads {
		ids = append(ids, id)
	}
	for id := range c.st.Writes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	outs := make([]Output, len(ids))
	for i, id := range ids {
		outs[i] = Output{Read: c.st.Reads[id], Write: c.st.Writes[id]}
	}
	return outs
}
