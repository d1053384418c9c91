package workload

import "sync/atomic"

// Sequence is a key source that is one fixed sequence of entries for the
// whole run, not a distribution each worker samples on its own: Cloak's
// temporal generator (whose pattern is a property of the whole trace) and
// a trace file. It is immutable; a run replays it through one Cursor
// shared by all its workers, which take the entries in order (the order
// in which they are handed out, not necessarily the order in which the
// store completes them when workers run concurrently), wrapping after the
// last.
type Sequence interface {
	Distribution
	// Len is the number of entries, at least 1.
	Len() uint64
	// At returns entry i mod Len(): its record and, if the sequence
	// carries operations, its operation (ok is false when it does not:
	// the caller draws the operation from its mix).
	At(i uint64) (record uint64, op Op, ok bool)
	// HasOps reports whether the entries carry operations.
	HasOps() bool
}

// Cursor hands out the entries of a Sequence in order to any number of
// goroutines, wrapping after the last.
type Cursor struct {
	next atomic.Uint64 // index of the next entry, not reduced modulo the length
	seq  Sequence
	mix  Mix
	seed uint64
}

// NewCursor starts a replay of seq at its first entry. mix and seed give
// the operations of entries that carry none (see Next).
func NewCursor(seq Sequence, mix Mix, seed uint64) *Cursor {
	return &Cursor{seq: seq, mix: mix, seed: seed}
}

// Next claims the next entry and returns its operation and record. An
// entry without an operation takes one from the mix, drawn from a hash of
// (seed, the entry's index), so the whole sequence of operations is fixed
// by the seed whichever goroutine claims which entry.
func (c *Cursor) Next() (Op, uint64) {
	i := c.claim()
	rec, op, ok := c.seq.At(i)
	if !ok {
		op = c.mix.entry(c.seed, i)
	}
	return op, rec
}

func (c *Cursor) claim() uint64 { return c.next.Add(1) - 1 }

// Chooser returns a Chooser of the records of the entries this cursor
// hands out. Any number of them may share the cursor.
func (c *Cursor) Chooser() Chooser {
	return chooserFunc(func() uint64 {
		rec, _, _ := c.seq.At(c.claim())
		return rec
	})
}

// sequenceWorker implements Distribution.Worker for a sequence used as a
// plain Distribution: each call replays the sequence from its start with
// a cursor of its own (bench instead shares one Cursor among a run's
// workers).
func sequenceWorker(s Sequence) Chooser { return NewCursor(s, Mix{}, 0).Chooser() }
