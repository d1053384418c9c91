package oblivistore

import (
	"fmt"
	"slices"
)

// Test hooks.

var SlotAddr = slotAddr

// Trace is what the core tells a test of a run (trace.go).
type Trace = trace

// Leaks are the flaws tests inject to show an audit catches them.
var Leaks = map[string]leak{
	"repeat reads real slot":       leakRepeatReadsReal,
	"missing key reads nothing":    leakSkipsEmptyReads,
	"read stops at the real level": leakStopsAtReal,
	"keyed partition":              leakKeyedPartition,
	"level written unpermuted":     leakLevelUnpermuted,
	"dummies read in order":        leakDummiesInOrder,
}

// Unscheduled are the leaks that change only secret choices (the
// partition a block is assigned to, where a level's blocks lie, which
// dummy a read takes), which no semaphore depends on: Invariant 1 holds
// under them, and the simulator of Theorem 1 reproduces their runs.
var Unscheduled = map[string]bool{
	"keyed partition":          true,
	"level written unpermuted": true,
	"dummies read in order":    true,
}

// Leak is an injected flaw (leak.go).
type Leak = leak

// LeakFixedSeed is the leak of the fresh-choices test, which no audit of
// one store's view can see.
const LeakFixedSeed = leakFixedSeed

// Access is one access of a scheduled run.
type Access struct {
	Op  OpKind
	Key string
}

// Run is a scheduled run of a core: its semaphores after every input, and
// what storage and a simulator may know of it.
type Run struct {
	Sems []Semaphores
	// Public is the run's inputs stripped of secrets: a request's key
	// and value are gone; a read's result is only its ID.
	Public []Input
	// Partitions are the partitions the requests read, in order of
	// admission, as storage saw them (a read of no slot: the partition
	// the core chose, which storage cannot see).
	Partitions []int32
}

// Schedule runs accesses through a core of capacity n, loaded with load
// keys "k0".."k<load-1>", on a public schedule: access i arrives at tick
// i, and every read and write completes delay ticks after it is issued,
// in issue order. Storage is a map of the blocks written.
func Schedule(n int, o Options, seed [32]byte, load int, accesses []Access, delay int) (Run, error) {
	o = o.EnsureDefaults(n)
	var run Run
	o.TestingKnobs.Trace.Read = func(p int32, _ []Slot, seq uint64) {
		if seq != 0 {
			run.Partitions = append(run.Partitions, p)
		}
	}
	c := NewCore(n, o, seed)
	storage := simStorage{}
	writes, _, err := c.Load(func(yield func(string, []byte) bool) {
		for i := range load {
			if !yield(fmt.Sprint("k", i), []byte{byte(i)}) {
				return
			}
		}
	})
	if err != nil {
		return run, err
	}
	for _, w := range writes {
		storage.write(w)
	}
	err = schedule(c, len(accesses), delay, func(i int) Input {
		return Input{Request: &Request{Op: accesses[i].Op, Key: accesses[i].Key, Val: []byte("v")}}
	}, storage, &run)
	return run, err
}

// simStorage is the storage tests drive a core against: the blocks
// written, each under its level's nonce.
type simStorage map[Slot]simSlot

// simSlot is a slot of simStorage: its level's nonce and block.
type simSlot struct {
	nonce uint64
	block Block
}

func (s simStorage) write(w *WriteIO) {
	for i, x := range w.Slots {
		s[x] = simSlot{w.Nonces[i], Block{Real: w.Blocks[i].Real, Val: append([]byte(nil), w.Blocks[i].Val...)}}
	}
}

// complete carries out an issued read or write and returns its
// completion; a read of a slot not written, or written under another
// nonce than the read names, is an error.
func (s simStorage) complete(o Output) (Input, error) {
	if o.Write != nil {
		s.write(o.Write)
		return Input{Write: &WriteDone{ID: o.Write.ID}}, nil
	}
	d := &ReadDone{ID: o.Read.ID}
	for i, x := range o.Read.Slots {
		got, ok := s[x]
		if !ok || got.nonce != o.Read.Nonces[i] {
			return Input{}, fmt.Errorf("read %d of slot %v under nonce %d: storage holds it under %d (written: %v)", o.Read.ID, x, o.Read.Nonces[i], got.nonce, ok)
		}
		d.Blocks = append(d.Blocks, got.block)
	}
	return Input{Read: d}, nil
}

type pending struct {
	due int
	out Output
}

// schedule drives c: request i arrives at tick i, I/O completes delay
// ticks after it is issued, until every request is answered.
func schedule(c *Core, requests, delay int, request func(int) Input, storage simStorage, run *Run) error {
	var queue []pending
	step := func(tick int, in Input) error {
		outs, err := c.Step(in)
		if err != nil {
			return err
		}
		run.Sems = append(run.Sems, c.Sems())
		run.Public = append(run.Public, public(in))
		for _, o := range outs {
			if o.Reply == nil {
				queue = append(queue, pending{tick + delay, o})
			}
		}
		return nil
	}
	for tick := 0; tick < requests || len(queue) > 0 || !c.Idle(); tick++ {
		if tick > requests+1_000_000 {
			return fmt.Errorf("the core stalled with %d requests waiting", len(c.frontState().Waiting)+len(c.frontState().Active))
		}
		if tick < requests {
			if err := step(tick, request(tick)); err != nil {
				return err
			}
		}
		for len(queue) > 0 && queue[0].due <= tick {
			in, err := storage.complete(queue[0].out)
			if err != nil {
				return err
			}
			queue = queue[1:]
			if err := step(tick, in); err != nil {
				return err
			}
		}
	}
	return nil
}

// public strips an input of what storage cannot see.
func public(in Input) Input {
	switch {
	case in.Request != nil:
		return Input{Request: &Request{}}
	case in.Read != nil:
		return Input{Read: &ReadDone{ID: in.Read.ID}}
	}
	return in
}

// Simulate is Theorem 1's simulator: from a run's public inputs and the
// partitions its requests read, and the public coins of seed, it replays
// the run on a core that holds no data (every access is to a key that is
// not stored, forced to read the partition the real one read) and
// returns that core's semaphores after every input. They equal the real
// run's when the scheduler's every semaphore change depends only on
// public information (Invariant 1).
func Simulate(n int, o Options, seed [32]byte, run Run) ([]Semaphores, error) {
	o = o.EnsureDefaults(n)
	o.TestingKnobs.Leak = leakNone
	c := NewCore(n, o, seed)
	c.front.forced = slices.Clone(run.Partitions)
	if _, _, err := c.Load(func(func(string, []byte) bool) {}); err != nil {
		return nil, err
	}
	var sems []Semaphores
	for i, in := range run.Public {
		switch {
		case in.Request != nil:
			in = Input{Request: &Request{Op: OpGet, Key: fmt.Sprint("simulated-", i)}}
		case in.Read != nil:
			r, ok := c.server().Reads[in.Read.ID]
			if !ok {
				return sems, fmt.Errorf("input %d: the simulator issued no read %d", i, in.Read.ID)
			}
			in = Input{Read: &ReadDone{ID: r.ID, Blocks: make([]Block, len(r.Slots))}}
		}
		if _, err := c.Step(in); err != nil {
			return sems, fmt.Errorf("input %d: %w", i, err)
		}
		sems = append(sems, c.Sems())
	}
	return sems, nil
}

// server returns the state of the core's only partition group (tests of
// one group).
func (c *Core) server() *Group { return &c.groups[0].st.Group }

// frontState returns the Front's state.
func (c *Core) frontState() *Front { return &c.front.st.Front }

// settled reports whether no checkpoint is being written.
func (l *machineLogs) settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.busy) == 0
}
