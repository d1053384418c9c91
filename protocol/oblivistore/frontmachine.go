package oblivistore

import (
	"errors"
	"math"
)

// FrontEntry is one entry of the Front's log; exactly one field is set.
type FrontEntry struct {
	Request *Request
	Msg     *ToFront // a message from a partition group
	Reseed  *Reseed
	Resend  *Resend
}

// FrontOutput is one output of the Front; exactly one field is set.
type FrontOutput struct {
	Msg   *ToGroup
	Reply *Reply
}

// frontState is a FrontMachine's whole state.
type frontState struct {
	Front Front
	// From delivers each group's messages in order, once each; Sent is
	// the sequence number of the last message sent to each group, Out
	// holds those each group has not acknowledged.
	From        []Link[FrontMsg]
	Sent        []uint64
	Out         []Outbox
	Incarnation uint64
	Pub, Sec    []byte // the random sources' states, in a snapshot only
}

// FrontMachine is the ORAM main algorithm (Front) as a Machine: the load
// balancer of Sec. VI-A, which treats the partition groups as its
// partitions.
//
// It draws from two random sources. pub makes the choices storage may
// learn, and draws the same amount per access whatever the workload: the
// evictions each access schedules and their partitions, and the
// partition an access to a key not on storage reads. sec makes the
// secret one: the partition a block is assigned to. Two workloads of
// equal length then see the same public coins.
type FrontMachine struct {
	st       frontState
	pub, sec source
	out      []FrontOutput
	trace    trace // TestingKnobs.Trace (tests only)
	// forced, tests only, replaces the partitions that accesses to keys
	// not on storage read, in order: a simulator replays the partitions
	// storage saw (export_test.go).
	forced []int32
}

const (
	pubLabel = "oblivistore/pub"
	secLabel = "oblivistore/sec"
)

func newFrontMachine(n int, g geometry, o Options, seed [32]byte) *FrontMachine {
	c := &FrontMachine{st: frontState{Front: newFront(n, g, o), From: make([]Link[FrontMsg], g.Groups), Sent: make([]uint64, g.Groups),
		Out: make([]Outbox, g.Groups)}, pub: newSource(seed, pubLabel), sec: newSource(seed, secLabel), trace: o.TestingKnobs.Trace}
	for i := range c.st.From {
		c.st.From[i], c.st.Out[i] = newLink[FrontMsg](), newOutbox()
	}
	return c
}

// Apply implements Machine: it applies the entry, then admits and
// answers requests until nothing more moves, and last lets every group's
// shuffler run (Progress), telling it whether requests wait for it; the
// Progress also acknowledges the group's messages (Outbox), so the Front
// never sends an acknowledgement alone. An acknowledgement alone and a
// Resend change nothing of that, and end there. It applies the entry
// lean (lean).
func (c *FrontMachine) Apply(e FrontEntry) ([]FrontOutput, error) {
	return c.apply(c.lean(e))
}

// apply is Apply of an entry already lean (Core.applyFront leans it to
// journal it).
func (c *FrontMachine) apply(e FrontEntry) ([]FrontOutput, error) {
	c.out = c.out[:0]
	f := &c.st.Front
	switch {
	case e.Request != nil:
		f.arrive(c, *e.Request)
	case e.Msg != nil:
		g := e.Msg.ID.From
		if g < 0 || int(g) >= len(c.st.From) {
			return nil, internal("message from unknown group %d", g)
		}
		c.st.Out[g].acked(e.Msg.Ack)
		if e.Msg.ID.Seq == 0 {
			return c.out, nil
		}
		for _, m := range c.st.From[g].accept(e.Msg.ID, e.Msg.Msg) {
			if err := f.handle(c, m); err != nil {
				return nil, err
			}
		}
	case e.Resend != nil:
		return c.resend()
	case e.Reseed != nil:
		c.pub.reseed(e.Reseed.Seed, pubLabel)
		c.sec.reseed(e.Reseed.Seed, secLabel)
		c.st.Incarnation = max(c.st.Incarnation, e.Reseed.Incarnation)
	default:
		return nil, errors.New("oblivistore: empty front entry")
	}
	for f.admit(c) || f.answer(c) {
	}
	b := f.blocked()
	for g := range c.st.Sent {
		c.sendGroup(Node(g), PartitionMsg{Progress: &Progress{Bypass: b}})
	}
	return c.out, nil
}

// lean returns e, its message less a block the Front does not keep: one
// a partition read brings for a request that overwrites its key blind
// (kv.Mutation.Blind: the block's value is replaced before anything reads
// it), or for one no longer active. The Front holds and logs its messages
// lean (Core.applyFront); applied whole or lean, they change its state
// alike.
func (c *FrontMachine) lean(e FrontEntry) FrontEntry {
	if e.Msg == nil {
		return e
	}
	m := *e.Msg
	switch f, r := m.Msg.Finished, m.Msg.Ready; {
	case f != nil && f.Val != nil && !c.st.Front.keeps(f.Seq):
		m.Msg.Finished = &ReadFinished{Seq: f.Seq, Found: f.Found}
	case r != nil && r.Val != nil && !c.st.Front.keeps(r.Seq):
		m.Msg.Ready = &BlockReady{Seq: r.Seq}
	default:
		return e
	}
	e.Msg = &m
	return e
}

// send sends a message about partition p to the group holding it.
func (c *FrontMachine) send(p int32, m PartitionMsg) {
	c.sendGroup(Node(p%int32(len(c.st.Sent))), m)
}

func (c *FrontMachine) sendGroup(g Node, m PartitionMsg) {
	c.st.Sent[g]++
	id := MsgID{From: FrontNode, Incarnation: c.st.Incarnation, Seq: c.st.Sent[g]}
	msg := &ToGroup{ID: id, Group: g, Ack: c.st.From[g].handed(), Msg: m}
	c.st.Out[g].hold(id.Seq, AppendGroupEntry(nil, GroupEntry{Msg: msg}))
	c.out = append(c.out, FrontOutput{Msg: msg})
}

// resend sends again every message a group has not acknowledged, with
// its first id and the latest acknowledgement.
func (c *FrontMachine) resend() ([]FrontOutput, error) {
	for g := range c.st.Out {
		for _, b := range c.st.Out[g].pending() {
			e, err := DecodeGroupEntry(b)
			if err != nil || e.Msg == nil {
				return nil, internal("a message held for group %d does not decode: %v", g, err)
			}
			e.Msg.Ack = c.st.From[g].handed()
			c.out = append(c.out, FrontOutput{Msg: e.Msg})
		}
	}
	return c.out, nil
}

// randomPart draws a block's secret partition.
func (c *FrontMachine) randomPart() int32 { return int32(c.sec.IntN(c.st.Front.Partitions)) }

// publicPart draws a public coin: a partition.
func (c *FrontMachine) publicPart() int32 { return int32(c.pub.IntN(c.st.Front.Partitions)) }

// drawEvictions draws how many evictions an access schedules: nu, or for
// a fractional nu its floor and one more with probability nu - floor(nu).
func (c *FrontMachine) drawEvictions(nu float64) int32 {
	e := int32(nu)
	if frac := nu - math.Floor(nu); frac > 0 && c.pub.Float64() < frac {
		e++
	}
	return e
}

// Snapshot implements Machine.
func (c *FrontMachine) Snapshot() ([]byte, error) {
	var errPub, errSec error
	c.st.Pub, errPub = c.pub.marshal()
	c.st.Sec, errSec = c.sec.marshal()
	if err := errors.Join(errPub, errSec); err != nil {
		return nil, err
	}
	b, err := encodeState(&c.st)
	c.st.Pub, c.st.Sec = nil, nil
	return b, err
}

// Restore implements Machine; the test hooks stay.
func (c *FrontMachine) Restore(b []byte) error {
	var st frontState
	if err := decodeState(b, &st); err != nil {
		return err
	}
	pub, errPub := restoreSource(st.Pub)
	sec, errSec := restoreSource(st.Sec)
	if err := errors.Join(errPub, errSec); err != nil {
		return err
	}
	st.Pub, st.Sec = nil, nil
	st.Front.fill()
	st.Out = append(st.Out, make([]Outbox, len(st.From)-len(st.Out))...) // none in an earlier build's snapshot
	for i := range st.From {
		if st.From[i].Held == nil {
			st.From[i].Held = sorted[uint64, FrontMsg]{}
		}
		if st.Out[i].Unacked == nil {
			st.Out[i] = newOutbox()
		}
	}
	c.st, c.pub, c.sec = st, pub, sec
	return nil
}
