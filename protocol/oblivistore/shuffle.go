package oblivistore

import (
	"errors"
	"fmt"
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
	ReadIDs  map[uint64]bool // shuffling cache-ins in flight
	Computed bool
	WriteID  uint64
	// NewLevels are Dest's levels as written, installed when the write
	// completes; Staged holds their real blocks meanwhile, by key.
	NewLevels []Level
	Staged    map[string][]byte
}

// shuffle runs the background shuffler (Fig. 7): it issues shuffling
// cache-ins as the shuffling I/O semaphore allows, shuffles a job once all
// its levels are read, and starts jobs for partitions with evictions
// scheduled. When requests wait on the early cache-in or eviction
// semaphore, only the shuffler can release them, so it runs without the
// I/O semaphore's limit (a public condition: it depends on arrivals and
// semaphore values only).
func (c *Core) shuffle() (bool, error) {
	moved := false
	bypass := c.admissionBlocked()
	for _, j := range c.st.Jobs {
		if j.Computed {
			continue
		}
		moved = c.cacheIns(j, bypass) || moved
		if c.readsDone(j) && (c.st.Sem.IO >= j.W || bypass) {
			if err := c.compute(j); err != nil {
				return false, err
			}
			moved = true
		}
	}
	for c.start() {
		moved = true
	}
	return moved, nil
}

// cacheIns issues the job's next shuffling cache-ins in one read.
func (c *Core) cacheIns(j *Job, bypass bool) bool {
	var read []Slot
	for _, l := range j.Marked {
		lv := &c.st.Parts[j.P].Levels[l]
		for lv.Unread > 0 && (c.st.Sem.IO > 0 || bypass) {
			read = append(read, Slot{P: j.P, L: l, S: lv.nextUnread()})
			c.st.Sem.IO--
		}
	}
	if len(read) == 0 {
		return false
	}
	j.ReadIDs[c.emitRead(read, 0)] = true
	c.st.Counters.ShuffleReads += uint64(len(read))
	return true
}

// readsDone reports whether every block of the job's levels is in the
// storage cache: all read, no read of them in flight.
func (c *Core) readsDone(j *Job) bool {
	if len(j.ReadIDs) > 0 {
		return false
	}
	for _, l := range j.Marked {
		lv := &c.st.Parts[j.P].Levels[l]
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
func (c *Core) plan(part *Partition) (marked, dest []int8, next int64) {
	top := c.st.Geo.Top
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
func (c *Core) start() bool {
	n := int32(len(c.st.Parts))
	for i := range n {
		p := (c.st.Cursor + i) % n
		part := &c.st.Parts[p]
		if part.Shuffling || part.J == 0 {
			continue
		}
		marked, dest, next := c.plan(part)
		var unread, w int64
		for _, l := range marked {
			unread += int64(part.Levels[l].Unread)
		}
		for _, l := range dest {
			w += int64(slots(int(l)))
		}
		need := max(unread, w)
		if c.st.Sem.Buffer < need {
			return false
		}
		c.st.Sem.Buffer -= need
		j := &Job{P: p, J: part.J, Next: next, Marked: marked, Dest: dest, W: w, Reserved: need, ReadIDs: map[uint64]bool{}}
		part.J, part.Shuffling = 0, true
		for _, l := range marked {
			part.Levels[l].Marked = true
		}
		c.st.Jobs = append(c.st.Jobs, j)
		c.st.Counters.MaxBuffer = max(c.st.Counters.MaxBuffer, c.bufferUsed())
		c.st.Cursor = (p + 1) % n
		c.st.Counters.Shuffles++
		return true
	}
	return false
}

// bufferUsed is the shuffling buffer in use: the reservation of each job
// not yet computed, the write of each computed one (compute returns the
// rest).
func (c *Core) bufferUsed() int64 {
	var used int64
	for _, j := range c.st.Jobs {
		if j.Computed {
			used += j.W
		} else {
			used += j.Reserved
		}
	}
	return used
}

type entry struct {
	key string
	val []byte
}

// compute is the atomic shuffle of Fig. 7, step 3: the real blocks of the
// marked levels and J blocks from the eviction cache (dummies where it has
// fewer) are permuted into the destination levels, and the write of those
// levels is issued.
func (c *Core) compute(j *Job) error {
	blocks, err := c.levelBlocks(j)
	if err != nil {
		return err
	}
	blocks = c.evict(j, blocks)
	c.sec.Shuffle(len(blocks), func(a, b int) { blocks[a], blocks[b] = blocks[b], blocks[a] })
	var room int
	for _, l := range j.Dest {
		room += 1 << l
	}
	if len(blocks) > room {
		return fmt.Errorf("%w: partition %d, %d blocks for %d places", ErrOverflow, j.P, len(blocks), room)
	}
	io := &WriteIO{ID: c.newID()}
	j.Staged = map[string][]byte{}
	j.NewLevels = make([]Level, len(j.Dest))
	for i := len(j.Dest) - 1; i >= 0; i-- {
		l := j.Dest[i]
		k := min(1<<l, len(blocks))
		j.NewLevels[i] = c.writeLevel(j, l, blocks[:k], io)
		blocks = blocks[k:]
	}
	j.Computed, j.WriteID = true, io.ID
	c.st.Writes[io.ID] = io
	c.out = append(c.out, Output{Write: io})
	c.st.Sem.IO -= j.W
	c.st.Sem.Buffer += j.Reserved - j.W
	c.st.Counters.ShuffleWrites += uint64(j.W)
	return nil
}

// levelBlocks fetches the marked levels' real blocks from the storage
// cache and returns their early cache-ins to the semaphore.
func (c *Core) levelBlocks(j *Job) ([]entry, error) {
	var blocks []entry
	for _, l := range j.Marked {
		lv := &c.st.Parts[j.P].Levels[l]
		for s, key := range lv.Keys {
			loc, ok := c.st.Pos[key]
			if !lv.Real[s] || !ok || loc.Where != inLevel || loc.slot() != (Slot{P: j.P, L: l, S: int32(s)}) {
				continue
			}
			val, ok := lv.Cached[int32(s)]
			if !ok {
				return nil, fmt.Errorf("oblivistore: partition %d level %d slot %d was read but is not in the storage cache", j.P, l, s)
			}
			blocks = append(blocks, entry{key, val})
		}
		c.st.Sem.Early += int64(lv.Early)
		lv.Early, lv.Cached = 0, nil
	}
	return blocks, nil
}

// evict takes up to J idle blocks assigned to the job's partition from
// the eviction cache, oldest first, and returns the J evictions to the
// eviction semaphore, whatever it found.
func (c *Core) evict(j *Job, blocks []entry) []entry {
	q := c.st.Queues[j.P]
	var taken int64
	for taken < j.J && len(q) > 0 {
		key := q[0]
		q = q[1:]
		h := c.st.Mem[key]
		if h == nil || h.Queued != j.P {
			continue
		}
		h.Queued = -1
		if h.Part != j.P || h.Refs > 0 || !h.Known || !h.Exists {
			continue
		}
		blocks = append(blocks, entry{key, h.Val})
		delete(c.st.Mem, key)
		taken++
	}
	c.st.Queues[j.P] = q
	c.st.Counters.Evicted += uint64(taken)
	c.st.Counters.DummyEvictions += uint64(j.J - taken)
	c.st.Sem.Evictions += j.J
	return blocks
}

// writeLevel lays out level l with blocks at random slots and dummies in
// the rest, stages the blocks and appends the level's slots to io.
func (c *Core) writeLevel(j *Job, l int8, blocks []entry, io *WriteIO) Level {
	m := slots(int(l))
	perm := c.sec.Perm(m)
	lv := Level{Filled: true, Nonce: c.sec.Uint64(), Real: make([]bool, m), Keys: make([]string, m),
		Read: make([]bool, m), Unread: int32(m)}
	for i, b := range blocks {
		s := int32(perm[i])
		lv.Real[s], lv.Keys[s] = true, b.key
		j.Staged[b.key] = b.val
		c.st.Pos[b.key] = Loc{P: j.P, L: l, S: s, Where: staged}
	}
	lv.Dummies = make([]int32, 0, m-len(blocks))
	for _, s := range perm[len(blocks):] {
		lv.Dummies = append(lv.Dummies, int32(s))
	}
	for s, key := range lv.Keys {
		io.Slots = append(io.Slots, Slot{P: j.P, L: l, S: int32(s)})
		io.Nonces = append(io.Nonces, lv.Nonce)
		b := Block{Real: lv.Real[s]}
		if b.Real {
			b.Val = j.Staged[key]
		}
		io.Blocks = append(io.Blocks, b)
	}
	return lv
}

// writeDone installs a job's levels once storage holds them: the marked
// levels are emptied, the destination levels filled, and the partition
// counter advanced (Fig. 7, end of step 3 and step 4).
func (c *Core) writeDone(d WriteDone) error {
	if _, ok := c.st.Writes[d.ID]; !ok {
		return fmt.Errorf("oblivistore: completion of unknown write %d", d.ID)
	}
	delete(c.st.Writes, d.ID)
	for i, j := range c.st.Jobs {
		if j.WriteID != d.ID {
			continue
		}
		part := &c.st.Parts[j.P]
		for _, l := range j.Marked {
			part.Levels[l] = Level{}
		}
		for i, l := range j.Dest {
			part.Levels[l] = j.NewLevels[i]
		}
		for key := range j.Staged {
			loc := c.st.Pos[key]
			loc.Where = inLevel
			c.st.Pos[key] = loc
		}
		part.C, part.Shuffling = j.Next, false
		c.st.Sem.Buffer += j.W
		c.st.Jobs = append(c.st.Jobs[:i], c.st.Jobs[i+1:]...)
		return nil
	}
	return nil
}
