package oblivistore

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
)

// ErrOverflow reports a partition whose real blocks outgrew its top level:
// an event of probability below 1e-15 per shuffle at the default sizes
// (topLevel), and possible only if the random choices were not random.
var ErrOverflow = errors.New("oblivistore: a partition holds more real blocks than its levels can")

// Job is one shuffle in progress: batch shuffling of Sec. V-C, Fig. 7.
type Job struct {
	P int32
	// J is the job size at the start (\hat J_p): evictions it shuffles in.
	J int64
	// Next is the partition counter once the shuffle is written.
	Next   int64
	Marked []int8 // levels read and shuffled
	Dest   []int8 // levels written
	W      int64  // slots written (cache-outs)
	// Reserved is the shuffling buffer the job holds from its start.
	Reserved int64
	ReadIDs  sorted[uint64, bool] // shuffling cache-ins in flight
	// Fetching: the job asked the eviction cache for its blocks (Fetch)
	// and waits for them; Computed: it shuffled and issued its write.
	Fetching bool
	Computed bool
	WriteID  uint64
	// NewLevels are Dest's levels as written, installed when the write
	// completes; Staged holds their real blocks meanwhile, by key.
	NewLevels []Level
	Staged    sorted[string, []byte]
}

// shuffle runs the background shuffler (Fig. 7): it issues shuffling
// cache-ins as the shuffling I/O semaphore allows, shuffles a job once all
// its levels are read, and starts jobs for partitions with evictions
// scheduled. When requests wait on the early cache-in or eviction
// semaphore, only the shuffler can release them, so it runs without the
// I/O semaphore's limit (a public condition: it depends on arrivals and
// semaphore values only).
func (s *Group) shuffle(c *GroupMachine) bool {
	bypass, moved := s.Bypass, false
	for _, j := range s.Jobs {
		if j.Fetching || j.Computed {
			continue
		}
		moved = s.cacheIns(c, j, bypass) || moved
		if s.readsDone(j) && (s.IO >= j.W || bypass) {
			s.fetch(c, j)
			moved = true
		}
	}
	for s.start() {
		moved = true
	}
	return moved
}

// cacheIns issues the job's next shuffling cache-ins in one read.
func (s *Group) cacheIns(c *GroupMachine, j *Job, bypass bool) bool {
	var read []Slot
	for _, l := range j.Marked {
		lv := &s.Parts[j.P].Levels[l]
		for lv.Unread > 0 && (s.IO > 0 || bypass) {
			read = append(read, Slot{P: j.P, L: l, S: lv.nextUnread(c.sec.Rand)})
			s.IO--
		}
	}
	if len(read) == 0 {
		return false
	}
	j.ReadIDs[s.emitRead(c, read, 0)] = true
	s.Counters.ShuffleReads += uint64(len(read))
	return true
}

// readsDone reports whether every block of the job's levels is in the
// storage cache: all read, no read of them in flight.
func (s *Group) readsDone(j *Job) bool {
	if len(j.ReadIDs) > 0 {
		return false
	}
	for _, l := range j.Marked {
		lv := &s.Parts[j.P].Levels[l]
		if lv.Unread > 0 || lv.Inflight > 0 {
			return false
		}
	}
	return true
}

// plan returns the levels a shuffle of part reads and writes and the
// counter after it. Bits of C+J that differ from C up to the highest
// differing bit h are the levels rewritten (Sec. V-C, batch shuffling):
// the filled levels up to h are read, the set bits of C+J up to h are
// written, and the written levels' capacity, (C+J) mod 2^(h+1), is at
// least the real blocks they receive. When C+J overflows the levels, the
// paper sets C to (C+J) mod the partition capacity without saying where
// the blocks go; here every filled level is merged into the top level,
// which stays filled (C = 2^L).
func (s *Group) plan(part *Partition) (marked, dest []int8, next int64) {
	top := s.Geo.Top
	next = part.C + part.J
	if next >= 1<<(top+1) {
		for l := range part.Levels {
			if part.Levels[l].Filled {
				marked = append(marked, int8(l))
			}
		}
		return marked, []int8{int8(top)}, 1 << top
	}
	h := bits.Len64(uint64(part.C^next)) - 1
	for l := 0; l <= h; l++ {
		if part.C>>l&1 == 1 {
			marked = append(marked, int8(l))
		}
		if next>>l&1 == 1 {
			dest = append(dest, int8(l))
		}
	}
	return marked, dest, next
}

// start begins the shuffle of the next partition, in round-robin order
// from the cursor, that has evictions scheduled and none in progress, if
// the shuffling buffer can hold it (Fig. 7, step 1). It reserves the
// buffer for the whole job at once: the most blocks it reads or writes.
func (s *Group) start() bool {
	n := int32(len(s.Parts))
	for i := range n {
		p := (s.Cursor + i) % n
		part := &s.Parts[p]
		if part.Shuffling || part.J == 0 {
			continue
		}
		marked, dest, next := s.plan(part)
		var unread, w int64
		for _, l := range marked {
			unread += int64(part.Levels[l].Unread)
		}
		for _, l := range dest {
			w += int64(slots(int(l)))
		}
		need := max(unread, w)
		if s.Buffer < need {
			return false
		}
		s.Buffer -= need
		j := &Job{P: p, J: part.J, Next: next, Marked: marked, Dest: dest, W: w, Reserved: need, ReadIDs: sorted[uint64, bool]{}}
		part.J, part.Shuffling = 0, true
		if s.Opts.Leak == leakRepeatReadsReal {
			s.forgetRereads(p)
		}
		for _, l := range marked {
			part.Levels[l].Marked = true
		}
		s.Jobs = append(s.Jobs, j)
		s.Counters.MaxBuffer = max(s.Counters.MaxBuffer, s.bufferUsed())
		s.Cursor = (p + 1) % n
		s.Counters.Shuffles++
		return true
	}
	return false
}

// bufferUsed is the shuffling buffer in use: the reservation of each job
// not yet computed, the write of each computed one (compute returns the
// rest).
func (s *Group) bufferUsed() int64 {
	var used int64
	for _, j := range s.Jobs {
		if j.Computed {
			used += j.W
		} else {
			used += j.Reserved
		}
	}
	return used
}

// fetch ends a job's reads: the early cache-ins of its levels return to
// the early cache-in semaphore, and the job asks the eviction cache for
// its J blocks (Fig. 7 step 3); blocks carries on when they come.
func (s *Group) fetch(c *GroupMachine, j *Job) {
	var early int64
	for _, l := range j.Marked {
		lv := &s.Parts[j.P].Levels[l]
		early += int64(lv.Early)
		lv.Early = 0
	}
	j.Fetching, c.fetched = true, true
	c.sendFront(FrontMsg{Fetch: &Fetch{P: j.P, J: j.J, Early: early}})
}

// blocks is the atomic shuffle of Fig. 7, step 3, once the eviction
// cache's blocks are in: the real blocks of the marked levels and the
// evicted blocks (dummies make up the J) are permuted into the destination
// levels, and the write of those levels is issued.
func (s *Group) blocks(c *GroupMachine, m Blocks) error {
	j := s.job(m.P)
	if j == nil || !j.Fetching {
		return internal("blocks for partition %d, which asked for none", m.P)
	}
	blocks, err := s.levelBlocks(j)
	if err != nil {
		return err
	}
	blocks = append(blocks, m.Entries...)
	gathered := c.trace.gatheringOrder(blocks)
	if s.Opts.Leak != leakLevelUnpermuted {
		c.sec.Shuffle(len(blocks), func(a, b int) { blocks[a], blocks[b] = blocks[b], blocks[a] })
	}
	var room int
	for _, l := range j.Dest {
		room += 1 << l
	}
	if len(blocks) > room {
		return fmt.Errorf("%w: partition %d, %d blocks for %d places", ErrOverflow, j.P, len(blocks), room)
	}
	io := &WriteIO{Group: s.Index, ID: s.newID()}
	j.Staged = sorted[string, []byte]{}
	j.NewLevels = make([]Level, len(j.Dest))
	for i := len(j.Dest) - 1; i >= 0; i-- {
		l := j.Dest[i]
		k := min(1<<l, len(blocks))
		j.NewLevels[i] = s.writeLevel(c, j, l, blocks[:k], io)
		c.trace.placed(j.P, l, &j.NewLevels[i], gathered)
		blocks = blocks[k:]
	}
	j.Fetching, j.Computed, j.WriteID = false, true, io.ID
	s.Writes[io.ID] = io
	c.out = append(c.out, GroupOutput{Write: io})
	s.IO -= j.W
	s.Buffer += j.Reserved - j.W
	s.Counters.ShuffleWrites += uint64(j.W)
	return nil
}

// levelBlocks fetches the marked levels' real blocks from the storage
// cache.
func (s *Group) levelBlocks(j *Job) ([]Entry, error) {
	var blocks []Entry
	for _, l := range j.Marked {
		lv := &s.Parts[j.P].Levels[l]
		for x, key := range lv.Keys {
			loc, ok := s.Where[key]
			if !lv.Real[x] || !ok || loc.Where != inLevel || loc.slot() != (Slot{P: j.P, L: l, S: int32(x)}) {
				continue
			}
			val, ok := lv.Cached[int32(x)]
			if !ok {
				return nil, internal("partition %d level %d slot %d was read but is not in the storage cache", j.P, l, x)
			}
			blocks = append(blocks, Entry{Key: key, Val: val})
		}
		lv.Cached = nil
	}
	return blocks, nil
}

// writeLevel lays out level l with blocks at random slots and dummies in
// the rest, stages the blocks and appends the level's slots to io.
func (s *Group) writeLevel(c *GroupMachine, j *Job, l int8, blocks []Entry, io *WriteIO) Level {
	m := slots(int(l))
	perm := s.layout(c, m, len(blocks))
	lv := Level{Filled: true, Nonce: c.sec.Uint64(), Real: make([]bool, m), Keys: make([]string, m),
		Read: make([]bool, m), Unread: int32(m)}
	for i, b := range blocks {
		x := int32(perm[i])
		lv.Real[x], lv.Keys[x] = true, b.Key
		j.Staged[b.Key] = b.Val
		s.Where[b.Key] = Loc{P: j.P, L: l, S: x, Where: staged}
	}
	lv.Dummies = make([]int32, 0, m-len(blocks))
	for _, x := range perm[len(blocks):] {
		lv.Dummies = append(lv.Dummies, int32(x))
	}
	for x, key := range lv.Keys {
		io.Slots = append(io.Slots, Slot{P: j.P, L: l, S: int32(x)})
		io.Nonces = append(io.Nonces, lv.Nonce)
		b := Block{Real: lv.Real[x]}
		if b.Real {
			b.Val = j.Staged[key]
		}
		io.Blocks = append(io.Blocks, b)
	}
	return lv
}

// layout returns the slots of a level of m slots that its k real blocks
// take, in order, then its dummy slots in the order dummy cache-ins read
// them: one random permutation (Fig. 7, step 3, "Permute"). Under
// leakLevelUnpermuted the real blocks take the first k slots in the
// order they came; the dummies are still read in a random order.
func (s *Group) layout(c *GroupMachine, m, k int) []int {
	perm := c.sec.Perm(m)
	if s.Opts.Leak != leakLevelUnpermuted {
		return perm
	}
	out := make([]int, 0, m)
	for x := range k {
		out = append(out, x)
	}
	for _, x := range perm {
		if x >= k {
			out = append(out, x)
		}
	}
	return out
}

// writeDone installs a job's levels once storage holds them: the marked
// levels are emptied, the destination levels filled, and the partition
// counter advanced (Fig. 7, end of step 3 and step 4). The completion of
// a write not outstanding (delivered twice) is ignored.
func (s *Group) writeDone(d WriteDone) {
	if _, ok := s.Writes[d.ID]; !ok {
		return
	}
	delete(s.Writes, d.ID)
	for i, j := range s.Jobs {
		if j.WriteID != d.ID {
			continue
		}
		part := &s.Parts[j.P]
		for _, l := range j.Marked {
			part.Levels[l] = Level{}
		}
		for i, l := range j.Dest {
			part.Levels[l] = j.NewLevels[i]
		}
		for key := range j.Staged {
			loc := s.Where[key]
			loc.Where = inLevel
			s.Where[key] = loc
		}
		part.C, part.Shuffling = j.Next, false
		s.Buffer += j.W
		s.Jobs = append(s.Jobs[:i], s.Jobs[i+1:]...)
		return
	}
}

// forgetRereads drops the slots leakRepeatReadsReal reads again in
// partition p, whose levels a shuffle starts to rewrite.
func (s *Group) forgetRereads(p int32) {
	maps.DeleteFunc(s.Reread, func(_ string, x Slot) bool { return x.P == p })
}

// job returns partition p's shuffle in progress, or nil.
func (s *Group) job(p int32) *Job {
	for _, j := range s.Jobs {
		if j.P == p {
			return j
		}
	}
	return nil
}
