package oblivistore

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
)

// Front is the ORAM main algorithm (Fig. 5) with the eviction cache, the
// position map's first level (which partition holds each block) and the
// Sequencer that answers requests in arrival order. It owns the early
// cache-in and eviction semaphores. It reaches the partitions only through
// PartitionMsg.
type Front struct {
	Opts       frontOptions
	Partitions int
	Levels     int64
	Capacity   int
	// Pos is the partition holding each key's block (on storage, in its
	// storage cache or being shuffled in); a key in Mem is not in Pos.
	Pos sorted[string, int32]
	// Mem holds the blocks in trusted memory: being accessed, or in the
	// eviction cache of their assigned partition (Queues).
	Mem    sorted[string, *Held]
	Queues [][]string // per partition: the eviction cache, oldest first
	// Waiting have arrived and wait for the semaphores; Active are
	// admitted and not answered, in arrival order.
	Waiting, Active  []*Req
	Early, Evictions int64 // the early cache-in and eviction semaphores
	Keys             int   // keys stored or being created
	NextSeq          uint64
	MaxEvictionCache int64
	// Evicted and DummyEvictions count the evictions that took a block
	// and those that found none (a dummy is shuffled in instead).
	Evicted, DummyEvictions uint64
}

// frontOptions are the options the front acts on.
type frontOptions struct {
	EvictionRate   float64
	EarlyCacheIns  int64
	EvictionsAhead int64
	Leak           leak
	ValueSize      int // the largest value a mutation may leave
}

// Held is a block in trusted memory: being accessed, or in the eviction
// cache of its assigned partition.
type Held struct {
	Part   int32 // assigned partition
	Val    []byte
	Known  bool // Val and Exists are the key's latest
	Exists bool
	Refs   int32 // admitted requests on the key not yet answered
	// Src is the request whose partition read brings the value, while
	// !Known; From is the partition it reads.
	Src  uint64
	From int32
	// Queued is the partition whose eviction queue holds the key, or -1.
	Queued int32
}

// Req is an admitted or waiting request.
type Req struct {
	Seq       uint64
	Op        OpKind
	Key       string
	Val       []byte
	If        kv.Condition
	ReturnOld bool
	Evictions int32 // evictions it schedules (nu, drawn at arrival)
	ReadDone  bool
	HasKey    bool // holds a reference on Mem[Key]
	Full      bool
}

func newFront(n int, g geometry, o Options) Front {
	return Front{
		Opts: frontOptions{EvictionRate: o.EvictionRate, EarlyCacheIns: int64(o.EarlyCacheIns),
			EvictionsAhead: int64(o.EvictionsAhead), Leak: o.TestingKnobs.Leak, ValueSize: cmp.Or(o.valueSize, math.MaxInt)},
		Partitions: g.Partitions, Levels: int64(g.Top + 1), Capacity: n,
		Pos: sorted[string, int32]{}, Mem: sorted[string, *Held]{}, Queues: make([][]string, g.Partitions),
		Early: int64(o.EarlyCacheIns), Evictions: int64(o.EvictionsAhead),
	}
}

// arrive queues a request; nu is drawn now, so the draw's place in the
// public coins depends only on the order of arrivals. A request whose ID
// arrived before is ignored: its reply went out or will.
func (f *Front) arrive(c *FrontMachine, r Request) {
	if r.ID != 0 && r.ID <= f.NextSeq {
		return
	}
	f.NextSeq++
	f.Waiting = append(f.Waiting, &Req{Seq: f.NextSeq, Op: r.Op, Key: r.Key, Val: r.Val, If: r.If, ReturnOld: r.ReturnOld,
		Evictions: c.drawEvictions(f.Opts.EvictionRate)})
}

// blocked reports whether a request waits on the early cache-in or the
// eviction semaphore (Fig. 5's first two steps).
func (f *Front) blocked() bool {
	if len(f.Waiting) == 0 {
		return false
	}
	return f.Early < f.Levels || f.Evictions < int64(f.Waiting[0].Evictions)
}

// admit starts the waiting requests the semaphores allow, in arrival
// order, each with one partition read (Fig. 5).
func (f *Front) admit(c *FrontMachine) bool {
	moved := false
	for len(f.Waiting) > 0 && !f.blocked() {
		r := f.Waiting[0]
		f.Waiting = f.Waiting[1:]
		f.Early -= f.Levels
		f.Evictions -= int64(r.Evictions)
		f.Active = append(f.Active, r)
		c.trace.admitted(r)
		fake := c.publicPart()
		if len(c.forced) > 0 {
			fake, c.forced = c.forced[0], c.forced[1:]
		}
		read := f.locate(c, r, fake)
		if f.Opts.Leak == leakSkipsEmptyReads && !read.Has && !r.HasKey {
			f.Early += f.Levels
			f.readFinished(c, r)
		} else {
			c.send(read.P, PartitionMsg{Read: &read})
		}
		moved = true
	}
	return moved
}

// locate returns request r's partition read and moves the key's block to
// trusted memory under a fresh random partition (Sec. III-A). A key in
// trusted memory reads its assigned partition, fake; a key not stored
// reads partition fake, drawn for every access.
func (f *Front) locate(c *FrontMachine, r *Req, fake int32) PartitionRead {
	read := PartitionRead{Seq: r.Seq, P: fake}
	if h := f.Mem[r.Key]; h != nil {
		read.P = h.Part
		if f.Opts.Leak == leakRepeatReadsReal && h.Src != 0 { // read from storage, not a new key
			read.P, read.Key, read.Has = h.From, r.Key, true
		}
		h.Part = f.assign(c, r.Key)
		h.Refs++
		r.HasKey = true
		return read
	}
	if p, ok := f.Pos[r.Key]; ok {
		delete(f.Pos, r.Key)
		read.P, read.Key, read.Has, read.Blind = p, r.Key, true, r.mutation().Blind()
		f.hold(c, r, &Held{Src: r.Seq, From: p})
		return read
	}
	if r.mutation().LeavesKey(false, f.Opts.ValueSize) {
		if f.Keys >= f.Capacity {
			r.Full = true
			return read
		}
		f.Keys++
		f.hold(c, r, &Held{Known: true})
	}
	return read
}

// hold puts the key's block in trusted memory under a fresh partition.
func (f *Front) hold(c *FrontMachine, r *Req, h *Held) {
	h.Part, h.Refs, h.Queued = f.assign(c, r.Key), 1, -1
	f.Mem[r.Key] = h
	r.HasKey = true
}

// assign draws the partition an accessed block is assigned to: a fresh
// random one (Sec. III-A), or under leakKeyedPartition one derived from
// its key.
func (f *Front) assign(c *FrontMachine, key string) int32 {
	if f.Opts.Leak == leakKeyedPartition {
		h := fnv.New32a()
		h.Write([]byte(key))
		return int32(h.Sum32() % uint32(f.Partitions))
	}
	return c.randomPart()
}

// handle takes a message from the partitions.
func (f *Front) handle(c *FrontMachine, m FrontMsg) error {
	switch {
	case m.Started != nil:
		f.Early += m.Started.NonEarly
	case m.Finished != nil:
		return f.finished(c, *m.Finished)
	case m.Ready != nil:
		f.ready(*m.Ready)
	case m.Fetch != nil:
		f.fetch(c, *m.Fetch)
	}
	return nil
}

// finished completes a request's partition read: the block it brings, if
// any, becomes the key's value.
func (f *Front) finished(c *FrontMachine, m ReadFinished) error {
	r := f.active(m.Seq)
	if r == nil {
		return internal("partition read of unknown request %d", m.Seq)
	}
	if m.Found {
		f.ready(BlockReady{Seq: m.Seq, Val: m.Val})
	}
	f.readFinished(c, r)
	return nil
}

// ready gives a key the block request seq's partition read brought, unless
// a later operation already set it.
func (f *Front) ready(m BlockReady) {
	r := f.active(m.Seq)
	if r == nil {
		return
	}
	if h := f.Mem[r.Key]; r.HasKey && h != nil && !h.Known && h.Src == m.Seq {
		h.Val, h.Known, h.Exists = m.Val, true, true
	}
}

// keeps reports whether the Front keeps the block request seq's
// partition read brings: the request is active and reads the block's
// value (not a blind overwrite).
func (f *Front) keeps(seq uint64) bool {
	r := f.active(seq)
	return r != nil && !r.mutation().Blind()
}

// active returns request seq if it is active, else nil.
func (f *Front) active(seq uint64) *Req {
	if i := slices.IndexFunc(f.Active, func(r *Req) bool { return r.Seq == seq }); i >= 0 {
		return f.Active[i]
	}
	return nil
}

// readFinished schedules the request's evictions at random partitions
// (Fig. 5, "on callback").
func (f *Front) readFinished(c *FrontMachine, r *Req) {
	r.ReadDone = true
	for range r.Evictions {
		p := c.publicPart()
		c.send(p, PartitionMsg{Evict: &Evict{P: p}})
	}
}

// answer replies to the oldest requests whose reads are done, in arrival
// order, applying each to its key's block.
func (f *Front) answer(c *FrontMachine) bool {
	moved := false
	for len(f.Active) > 0 {
		r := f.Active[0]
		h := f.Mem[r.Key]
		if !r.ReadDone || (r.HasKey && !h.Known && !r.mutation().Blind()) {
			break
		}
		f.Active = f.Active[1:]
		c.out = append(c.out, FrontOutput{Reply: f.apply(r, h)})
		moved = true
	}
	return moved
}

// apply runs r's mutation on its key's block (none: the key is not
// stored and r does not make it) and answers it.
func (f *Front) apply(r *Req, h *Held) *Reply {
	rep := &Reply{Seq: r.Seq, Full: r.Full}
	if r.Full {
		return rep
	}
	var old []byte
	exists := false
	if r.HasKey {
		old, exists = h.Val, h.Exists
	}
	next, after, res, err := r.mutation().Apply(old, exists, f.Opts.ValueSize)
	rep.Result, rep.Rejected = res, kv.RejectionOf(err)
	if !r.HasKey {
		return rep
	}
	if res.Written || r.mutation().Blind() {
		h.Val, h.Exists, h.Known = next, after, true
	}
	h.Refs--
	if h.Refs == 0 {
		f.settle(r.Key, h)
	}
	return rep
}

func (r *Req) mutation() kv.Mutation {
	return kv.Mutation{Op: r.Op, Arg: r.Val, If: r.If, ReturnOld: r.ReturnOld}
}

// settle puts an idle block in its partition's eviction cache, or forgets
// a deleted one.
func (f *Front) settle(key string, h *Held) {
	if !h.Exists {
		delete(f.Mem, key)
		f.Keys--
		return
	}
	if h.Queued != h.Part {
		f.Queues[h.Part] = append(f.Queues[h.Part], key)
		h.Queued = h.Part
	}
	f.MaxEvictionCache = max(f.MaxEvictionCache, int64(len(f.Mem)))
}

// fetch answers a shuffle's Fetch: up to J idle blocks assigned to the
// partition leave the eviction cache, oldest first, and the J evictions
// return to the eviction semaphore, whatever was found (Fig. 7 step 3).
func (f *Front) fetch(c *FrontMachine, m Fetch) {
	f.Early += m.Early
	q := f.Queues[m.P]
	var out []Entry
	for int64(len(out)) < m.J && len(q) > 0 {
		key := q[0]
		q = q[1:]
		h := f.Mem[key]
		if h == nil || h.Queued != m.P {
			continue
		}
		h.Queued = -1
		if h.Part != m.P || h.Refs > 0 || !h.Known || !h.Exists {
			continue
		}
		out = append(out, Entry{Key: key, Val: h.Val})
		delete(f.Mem, key)
		f.Pos[key] = m.P
	}
	f.Queues[m.P] = q
	f.Evictions += m.J
	f.Evicted += uint64(len(out))
	f.DummyEvictions += uint64(m.J) - uint64(len(out))
	c.send(m.P, PartitionMsg{Blocks: &Blocks{P: m.P, Entries: out}})
}

// storedKeys returns the keys stored: those on storage (Pos), and those in
// trusted memory whose block exists or is being read from storage.
func (f *Front) storedKeys() []string {
	keys := make([]string, 0, f.Keys)
	for key := range f.Pos {
		keys = append(keys, key)
	}
	for key, h := range f.Mem {
		if h.Exists || !h.Known {
			keys = append(keys, key)
		}
	}
	return keys
}
