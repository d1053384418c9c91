package oblivistore

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
	// block's key. A slot holds its key's block only while Pos says so.
	Real []bool
	Keys []string
	// Dummies are the dummy slots in the order dummy cache-ins read them;
	// NextDummy is the dummy counter.
	Dummies   []int32
	NextDummy int32
	// Read flags the slots read since the level was written; Unread
	// counts the others, and Scan is the lowest slot that may be unread.
	Read   []bool
	Unread int32
	Scan   int32
	// Cached is the storage cache: real blocks read early or by the
	// shuffler, still belonging to this level, by slot.
	Cached map[int32][]byte
	// Early counts early cache-ins to return to the early cache-in
	// semaphore when the level is shuffled (Fig. 7, step 3).
	Early int32
	// Inflight counts reads of the level not yet completed.
	Inflight int32
}

// nextUnread marks and returns the lowest unread slot, or -1.
func (lv *Level) nextUnread() int32 {
	for ; lv.Scan < int32(len(lv.Read)); lv.Scan++ {
		if !lv.Read[lv.Scan] {
			s := lv.Scan
			lv.markRead(s)
			return s
		}
	}
	return -1
}

func (lv *Level) markRead(s int32) {
	lv.Read[s] = true
	lv.Unread--
}

// nextDummy marks and returns the next unread dummy slot, or -1 when the
// level's dummies are used up.
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

// readPartition reads one slot of every filled level of partition p for
// request r: the target slot where the block is, a fake read elsewhere
// (Fig. 6). Which slot a fake read takes depends only on the level's
// public state: an early cache-in (the lowest unread slot) when the level
// is marked for shuffling, else the next dummy.
func (c *Core) readPartition(r *Req, p int32, target *Slot) {
	if c.st.Opts.Leak == leakSkipsEmptyReads && target == nil && !r.HasKey {
		c.st.Sem.Early += c.levels()
		c.readFinished(r)
		return
	}
	var read []Slot
	stopped := false
	for l := range c.st.Parts[p].Levels {
		if stopped {
			c.st.Sem.Early++
			continue
		}
		s, early := c.readLevel(p, int8(l), target)
		if !early {
			c.st.Sem.Early++ // Fig. 6 step 2: no early cache-in here
		}
		if s >= 0 {
			read = append(read, Slot{P: p, L: int8(l), S: s})
		}
		stopped = c.st.Opts.Leak == leakStopsAtReal && target != nil && target.L == int8(l)
	}
	if len(read) == 0 {
		if c.readIssued != nil {
			c.readIssued(p, nil, true)
		}
		c.readFinished(r)
		return
	}
	r.ReadID = c.emitRead(read, r.Seq)
}

// readLevel picks the slot of level l a partition read takes, or -1, and
// whether it is an early cache-in.
func (c *Core) readLevel(p int32, l int8, target *Slot) (slot int32, early bool) {
	lv := &c.st.Parts[p].Levels[l]
	if !lv.Filled {
		return -1, false
	}
	if target != nil && target.L == l && (!lv.Read[target.S] || c.st.Opts.Leak == leakRepeatReadsReal) {
		if !lv.Read[target.S] {
			lv.markRead(target.S)
		}
		c.st.Counters.RealReads++
		return target.S, false
	}
	if lv.Marked {
		s := lv.nextUnread()
		if s >= 0 {
			lv.Early++
			c.st.Counters.EarlyReads++
		}
		return s, s >= 0
	}
	if s := lv.nextDummy(); s >= 0 {
		c.st.Counters.DummyReads++
		return s, false
	}
	// The level's dummies are used up (it was read more often than it
	// has dummies before its reshuffle): read the lowest unread slot; a
	// real block read this way waits in the storage cache like an early
	// cache-in. Whether this happens depends only on how often the level
	// was read, which storage sees.
	s := lv.nextUnread()
	if s >= 0 {
		c.st.Counters.DummyReads++
	}
	return s, false
}
