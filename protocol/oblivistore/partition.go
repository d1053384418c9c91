package oblivistore

import (
	"cmp"
	"math/rand/v2"
)

// Group is a partition group's state (an ORAM node of Sec. VI): its
// partitions' levels, the second level of the position map (each block's
// level and slot), the storage cache, the partition reader (Fig. 6) and
// the background shuffler (Fig. 7, in shuffle.go). It owns its own
// shuffling buffer and shuffling I/O semaphores and all storage I/O of
// its partitions. It hears from the ORAM main algorithm only through
// PartitionMsg, and answers with FrontMsg.
type Group struct {
	Geo  geometry
	Opts groupOptions
	// Index is the group's; it holds the partitions p with p mod Count =
	// Index. Parts is indexed by partition: the others have no levels.
	Index, Count int32
	Parts        []Partition
	// Where is each block's place in its partition; a block not here is
	// not in any of the group's partitions.
	Where sorted[string, Loc]
	Jobs  []*Job // shuffles in progress, in start order
	// Reads and Writes are the backend calls issued and not completed;
	// ReadOwner is the request a read is for (0: a shuffle's).
	Reads     sorted[uint64, *ReadIO]
	ReadOwner sorted[uint64, uint64]
	Writes    sorted[uint64, *WriteIO]
	// Pending are the requests' partition reads not finished; Waiters the
	// slots whose block a request waits for (by Slot.key).
	Pending sorted[uint64, *PendingRead]
	Waiters sorted[uint64, uint64]
	// Buffer and IO are the shuffling buffer and shuffling I/O
	// semaphores.
	Buffer, IO int64
	// Bypass is the Front's last word on whether requests wait for the
	// shuffler (Progress).
	Bypass   bool
	NextID   uint64
	Cursor   int32
	Counters Counters
	// Reread, with leakRepeatReadsReal only, keeps the slot each block was
	// last read from, while its level stands.
	Reread sorted[string, Slot]
}

// groupOptions are the options the partitions act on.
type groupOptions struct {
	ShufflingBuffer    int64
	ShuffleIOPerAccess int64
	ShuffleIOAhead     int64
	Leak               leak
}

// Counters are the partitions' statistics.
type Counters struct {
	RealReads, DummyReads, EarlyReads, ShuffleReads, ShuffleWrites uint64
	Shuffles                                                       uint64
	MaxBuffer                                                      int64
}

// Where a block is in its partition.
const (
	inLevel uint8 = iota // in slot (P, L, S) on storage
	staged               // shuffled into slot (P, L, S), being written
)

// Loc is where a block is in its partition.
type Loc struct {
	P     int32
	L     int8
	S     int32
	Where uint8
}

func (l Loc) slot() Slot { return Slot{P: l.P, L: l.L, S: l.S} }

// key packs a slot into one ordered map key.
func (x Slot) key() uint64 {
	return uint64(uint32(x.P))<<40 | uint64(uint8(x.L))<<32 | uint64(uint32(x.S))
}

// PendingRead is a request's partition read in progress.
type PendingRead struct {
	Has       bool // the request wants a block of this partition
	Known     bool // and it has it: Val
	Val       []byte
	ReadsDone bool // its slots are read, and ReadFinished sent
	Blind     bool // the request overwrites the block unread (PartitionRead)
}

// Partition is one partition's state (Sec. V-C).
type Partition struct {
	// C is the partition counter: level l is filled when bit l is set
	// (the top level, once filled by a merge, stays filled; shuffle.go).
	C int64
	// J is the job size: evictions scheduled and not yet shuffled in.
	J int64
	// Shuffling is bShuffle: a shuffle of this partition is in progress.
	Shuffling bool
	Levels    []Level
}

// Level is one level of a partition: 2*2^l slots on storage, at least
// half of them dummies, permuted at random when written.
type Level struct {
	Filled bool
	// Marked: the level is being shuffled; reads of it are early
	// cache-ins (Table I).
	Marked bool
	// Nonce is drawn at every write of the level and bound into every
	// slot's seal, so storage cannot answer with an older copy.
	Nonce uint64
	// Real flags the slots written with a real block, and Keys is that
	// block's key. A slot holds its key's block only while Where says so.
	Real []bool
	Keys []string
	// Dummies are the dummy slots in the order dummy cache-ins read them;
	// NextDummy is the dummy counter.
	Dummies   []int32
	NextDummy int32
	// Read flags the slots read since the level was written; Unread
	// counts the others.
	Read   []bool
	Unread int32
	// ReadOut is the order in which the level's slots are read out (by
	// early and shuffling cache-ins, or once its dummies are used up),
	// drawn when the read-out begins; Scan is the next place in it.
	ReadOut []int32
	Scan    int32
	// Cached is the storage cache: real blocks read early or by the
	// shuffler, still belonging to this level, by slot.
	Cached sorted[int32, []byte]
	// Early counts early cache-ins to return to the early cache-in
	// semaphore when the level is shuffled (Fig. 7, step 3).
	Early int32
	// Inflight counts reads of the level not yet completed.
	Inflight int32
}

func newGroup(g geometry, o Options, index int32) Group {
	s := Group{Geo: g,
		Opts: groupOptions{ShufflingBuffer: int64(o.ShufflingBuffer), ShuffleIOPerAccess: int64(o.ShuffleIOPerAccess),
			ShuffleIOAhead: int64(o.ShuffleIOAhead), Leak: o.TestingKnobs.Leak},
		Index: index, Count: int32(g.Groups), Parts: make([]Partition, g.Partitions),
		Buffer: int64(o.ShufflingBuffer), IO: int64(o.ShuffleIOAhead)}
	s.fill()
	for p := range s.Parts {
		if s.owns(int32(p)) {
			s.Parts[p].Levels = make([]Level, g.Top+1)
		}
	}
	return s
}

// fill makes the maps an empty state or gob leaves nil.
func (s *Group) fill() {
	fillMap(&s.Where)
	fillMap(&s.Reads)
	fillMap(&s.ReadOwner)
	fillMap(&s.Writes)
	fillMap(&s.Pending)
	fillMap(&s.Waiters)
	fillMap(&s.Reread)
	for _, j := range s.Jobs {
		fillMap(&j.ReadIDs)
		if j.Computed {
			fillMap(&j.Staged)
		}
	}
}

// fillMap makes *m an empty map if it is nil.
func fillMap[K cmp.Ordered, V any](m *sorted[K, V]) {
	if *m == nil {
		*m = sorted[K, V]{}
	}
}

// owns reports whether partition p is the group's.
func (s *Group) owns(p int32) bool { return p%s.Count == s.Index }

// nextUnread marks and returns an unread slot, or -1: the next in the
// read-out order, a random order of the slots unread when the read-out
// began. The paper leaves the order of early and shuffling cache-ins
// open ("a previously unread block", Table I; Fig. 7, step 2); a random
// one makes every read of a level, of whatever kind, take a slot uniform
// among those storage has not seen read since the level was written, as
// dummy and real reads do (UnreadSlotChoices checks it from the
// Tap). Slot order would be as safe, the layout being random, but then
// storage's view could not be checked: a read-out in slot order looks
// like the reads of a level written unpermuted.
func (lv *Level) nextUnread(r *rand.Rand) int32 {
	if lv.Unread == 0 {
		return -1
	}
	if lv.ReadOut == nil {
		lv.ReadOut, lv.Scan = lv.unreadSlots(), 0
		r.Shuffle(len(lv.ReadOut), func(a, b int) { lv.ReadOut[a], lv.ReadOut[b] = lv.ReadOut[b], lv.ReadOut[a] })
	}
	for ; lv.Scan < int32(len(lv.ReadOut)); lv.Scan++ {
		if s := lv.ReadOut[lv.Scan]; !lv.Read[s] {
			lv.Scan++
			lv.markRead(s)
			return s
		}
	}
	return -1
}

func (lv *Level) unreadSlots() []int32 {
	out := make([]int32, 0, lv.Unread)
	for s, read := range lv.Read {
		if !read {
			out = append(out, int32(s))
		}
	}
	return out
}

func (lv *Level) markRead(s int32) {
	lv.Read[s] = true
	lv.Unread--
}

// nextDummy marks and returns the next unread dummy slot in the level's
// random dummy order (Table I: "the next dummy block from a
// pseudo-random location"), or -1 when the level's dummies are used up.
func (lv *Level) nextDummy() int32 {
	for ; lv.NextDummy < int32(len(lv.Dummies)); lv.NextDummy++ {
		if s := lv.Dummies[lv.NextDummy]; !lv.Read[s] {
			lv.NextDummy++
			lv.markRead(s)
			return s
		}
	}
	return -1
}

// firstDummy marks and returns the lowest unread dummy slot, or -1: the
// dummy read of leakDummiesInOrder.
func (lv *Level) firstDummy() int32 {
	for s, real := range lv.Real {
		if !real && !lv.Read[s] {
			lv.markRead(int32(s))
			return int32(s)
		}
	}
	return -1
}

func (s *Group) level(x Slot) *Level { return &s.Parts[x.P].Levels[x.L] }

// handle takes a message from the ORAM main algorithm.
func (s *Group) handle(c *GroupMachine, m PartitionMsg) error {
	switch {
	case m.Read != nil:
		return s.read(c, *m.Read)
	case m.Evict != nil:
		if !s.owns(m.Evict.P) {
			return internal("group %d was asked to evict to partition %d", s.Index, m.Evict.P)
		}
		s.Parts[m.Evict.P].J++
	case m.Blocks != nil:
		return s.blocks(c, *m.Blocks)
	case m.Progress != nil:
		s.Bypass = m.Progress.Bypass
	}
	return nil
}

// read is ReadPartition (Fig. 6): one slot of every readable level of the
// partition, the wanted block's own slot where it is unread, a fake read
// elsewhere. Which slot a fake read takes depends only on the level's
// public state: an early cache-in (the next slot of the level's random
// read-out order) when the level is marked for shuffling, else the next
// dummy. Each read adds to the
// shuffling I/O semaphore.
func (s *Group) read(c *GroupMachine, m PartitionRead) error {
	if !s.owns(m.P) {
		return internal("group %d was asked to read partition %d", s.Index, m.P)
	}
	s.IO = min(s.IO+s.Opts.ShuffleIOPerAccess, s.Opts.ShuffleIOAhead)
	pr := &PendingRead{Has: m.Has, Blind: m.Blind}
	target, err := s.take(c, m, pr)
	if err != nil {
		return err
	}
	var slots []Slot
	nonEarly := int64(0)
	stopped := false
	for l := range s.Parts[m.P].Levels {
		if stopped {
			nonEarly++
			continue
		}
		x, early := s.readLevel(c, m.P, int8(l), target)
		if !early {
			nonEarly++
		}
		if x >= 0 {
			slots = append(slots, Slot{P: m.P, L: int8(l), S: x})
		}
		stopped = s.Opts.Leak == leakStopsAtReal && target != nil && target.L == int8(l)
	}
	c.sendFront(FrontMsg{Started: &ReadStarted{Seq: m.Seq, NonEarly: nonEarly}})
	s.Pending[m.Seq] = pr
	if len(slots) == 0 {
		c.trace.read(m.P, nil, m.Seq)
		pr.ReadsDone = true
	} else {
		s.emitRead(c, slots, m.Seq)
	}
	s.finish(c, m.Seq)
	return nil
}

// take finds the block a read wants and returns its slot if it is to be
// read from storage; a block already in the storage cache or being
// shuffled in is taken from there (Fig. 6, ReadReal), one whose slot is
// being read waits for that read. The block leaves the partition.
func (s *Group) take(c *GroupMachine, m PartitionRead, pr *PendingRead) (*Slot, error) {
	if !m.Has {
		return nil, nil
	}
	loc, ok := s.Where[m.Key]
	if !ok && s.Opts.Leak == leakRepeatReadsReal {
		pr.Has = false // the block is in trusted memory: the read is fake, but takes its old slot
		if x, again := s.Reread[m.Key]; again && x.P == m.P && !s.Parts[x.P].Shuffling {
			return &x, nil
		}
		return nil, nil
	}
	if !ok {
		return nil, internal("partition %d was asked for a block it does not hold", m.P)
	}
	if loc.P != m.P {
		return nil, internal("partition %d was asked for a block of partition %d", m.P, loc.P)
	}
	delete(s.Where, m.Key)
	x := loc.slot()
	if s.Opts.Leak == leakRepeatReadsReal && !s.Parts[m.P].Shuffling {
		s.Reread[m.Key] = x // until the partition's next shuffle starts (forgetRereads)
	}
	switch lv := s.level(x); {
	case loc.Where == staged:
		j := s.job(loc.P)
		pr.Val, pr.Known = j.Staged[m.Key], true
		delete(j.Staged, m.Key)
	case !lv.Read[x.S]:
		s.Waiters[x.key()] = m.Seq
		return &x, nil
	case lv.Cached[x.S] != nil:
		pr.Val, pr.Known = lv.Cached[x.S], true
		delete(lv.Cached, x.S)
	default:
		s.Waiters[x.key()] = m.Seq // its early or shuffling cache-in is in flight
	}
	return nil, nil
}

// readLevel picks the slot of level l a partition read takes, or -1, and
// whether it is an early cache-in.
func (s *Group) readLevel(c *GroupMachine, p int32, l int8, target *Slot) (slot int32, early bool) {
	lv := &s.Parts[p].Levels[l]
	if !lv.Filled {
		return -1, false
	}
	if target != nil && target.L == l {
		// A level marked for shuffling with unread slots returns nothing
		// to the early cache-in semaphore, whichever slot the read takes
		// (ObliviStore Fig. 6, step 2): the real block read there counts
		// as an early cache-in, as a fake read would.
		early = lv.Marked && lv.Unread > 0
		if !lv.Read[target.S] {
			lv.markRead(target.S)
		}
		if early {
			lv.Early++
		}
		s.Counters.RealReads++
		return target.S, early
	}
	if lv.Marked {
		x := lv.nextUnread(c.sec.Rand)
		if x >= 0 {
			lv.Early++
			s.Counters.EarlyReads++
		}
		return x, x >= 0
	}
	if x := s.dummy(lv); x >= 0 {
		s.Counters.DummyReads++
		c.trace.dummy(lv, x)
		return x, false
	}
	// The level's dummies are used up (it was read more often than it
	// has dummies before its reshuffle): read it out; a real block read
	// this way waits in the storage cache like an early cache-in. Whether
	// this happens depends only on how often the level was read, which
	// storage sees.
	x := lv.nextUnread(c.sec.Rand)
	if x >= 0 {
		s.Counters.DummyReads++
	}
	return x, false
}

// dummy marks and returns the slot a dummy cache-in of lv takes, or -1.
func (s *Group) dummy(lv *Level) int32 {
	if s.Opts.Leak == leakDummiesInOrder {
		return lv.firstDummy()
	}
	return lv.nextDummy()
}

// finish reports a request's partition read complete once its slots are
// read, with the block it wants if at hand; otherwise the block follows
// when the read bringing it returns (route).
func (s *Group) finish(c *GroupMachine, seq uint64) {
	pr := s.Pending[seq]
	if pr == nil || !pr.ReadsDone {
		return
	}
	c.sendFront(FrontMsg{Finished: &ReadFinished{Seq: seq, Found: pr.Known, Val: pr.Val}})
	if !pr.Has || pr.Known {
		delete(s.Pending, seq)
	}
}

func (s *Group) newID() uint64 {
	s.NextID++
	return s.NextID
}

// emitRead issues a read of slots on behalf of request seq (0: a job).
func (s *Group) emitRead(c *GroupMachine, slots []Slot, seq uint64) uint64 {
	io := &ReadIO{Group: s.Index, ID: s.newID(), Slots: slots, Nonces: make([]uint64, len(slots))}
	for i, x := range slots {
		lv := s.level(x)
		io.Nonces[i] = lv.Nonce
		lv.Inflight++
	}
	s.Reads[io.ID] = io
	s.ReadOwner[io.ID] = seq
	c.trace.read(slots[0].P, slots, seq)
	c.out = append(c.out, GroupOutput{Read: io})
	return io.ID
}

// readDone routes a read's blocks: a real block goes to the request
// waiting for it, or to its level's storage cache. The result of a read
// not outstanding (delivered twice) is ignored.
func (s *Group) readDone(c *GroupMachine, d ReadDone) error {
	io, ok := s.Reads[d.ID]
	if !ok {
		return nil
	}
	if len(d.Blocks) != len(io.Slots) {
		return internalTampered("read %d returned %d blocks for %d slots", d.ID, len(d.Blocks), len(io.Slots))
	}
	delete(s.Reads, d.ID)
	seq := s.ReadOwner[d.ID]
	delete(s.ReadOwner, d.ID)
	for i, x := range io.Slots {
		lv := s.level(x)
		lv.Inflight--
		if lv.Real[x.S] != d.Blocks[i].Real {
			return internalTampered("slot %v", x)
		}
		if lv.Real[x.S] {
			s.route(c, x, lv.Keys[x.S], d.Blocks[i].Val)
		}
	}
	if seq != 0 {
		s.Pending[seq].ReadsDone = true
		s.finish(c, seq)
		return nil
	}
	for _, j := range s.Jobs {
		delete(j.ReadIDs, d.ID)
	}
	return nil
}

// keeps reports whether the group keeps the value of key's real block
// read from slot x (route): in the storage cache, or for a request that
// reads it.
func (s *Group) keeps(x Slot, key string) bool {
	if s.caches(x, key) {
		return true
	}
	seq, ok := s.Waiters[x.key()]
	pr := s.Pending[seq]
	return ok && pr != nil && !pr.Blind
}

// caches reports whether key's block read from slot x still belongs
// there: it goes to the storage cache.
func (s *Group) caches(x Slot, key string) bool {
	loc, ok := s.Where[key]
	return ok && loc.Where == inLevel && loc.slot() == x
}

// route delivers a real block read from slot x: to the storage cache if
// it still belongs there, else to the request waiting for it.
func (s *Group) route(c *GroupMachine, x Slot, key string, val []byte) {
	if s.caches(x, key) {
		lv := s.level(x)
		if lv.Cached == nil {
			lv.Cached = sorted[int32, []byte]{}
		}
		lv.Cached[x.S] = val
		return
	}
	seq, ok := s.Waiters[x.key()]
	if !ok {
		return
	}
	delete(s.Waiters, x.key())
	pr := s.Pending[seq]
	if pr == nil {
		return
	}
	if pr.ReadsDone {
		delete(s.Pending, seq)
		c.sendFront(FrontMsg{Ready: &BlockReady{Seq: seq, Val: val}})
		return
	}
	pr.Val, pr.Known = val, true
}

func internalTampered(format string, args ...any) error {
	return internal("%w: "+format, append([]any{ErrTampered}, args...)...)
}
