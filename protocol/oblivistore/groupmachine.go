package oblivistore

import (
	"errors"
	"slices"
)

// GroupEntry is one entry of a partition group's log; exactly one field
// is set.
type GroupEntry struct {
	Msg    *ToGroup // a message from the Front
	Read   *ReadDone
	Write  *WriteDone
	Reseed *Reseed
	Resend *Resend
}

// GroupOutput is one output of a partition group; exactly one field is
// set.
type GroupOutput struct {
	Msg   *ToFront
	Read  *ReadIO
	Write *WriteIO
}

// groupState is a GroupMachine's whole state.
type groupState struct {
	Group Group
	// From delivers the Front's messages in order, once each.
	From        Link[PartitionMsg]
	Incarnation uint64
	Sent        uint64 // the sequence number of the last message sent
	Out         Outbox // the messages the Front has not acknowledged
	Sec         []byte // the random source's state, in a snapshot only
}

// GroupMachine is a partition group as a Machine: an ORAM node of Sec.
// VI, a set of partitions with its own shuffler, semaphores, random
// source and id space. Its random source makes only secret choices
// (level layouts, nonces, read-out orders).
type GroupMachine struct {
	st    groupState
	sec   source
	out   []GroupOutput
	trace trace // TestingKnobs.Trace (tests only)
	// fetched: the shuffler sent a Fetch during this entry's run.
	fetched bool
}

func newGroupMachine(g geometry, o Options, index int32, seed [32]byte) *GroupMachine {
	c := &GroupMachine{st: groupState{Group: newGroup(g, o, index), From: newLink[PartitionMsg](), Out: newOutbox()},
		sec: newSource(seed, groupLabel), trace: o.TestingKnobs.Trace}
	return c
}

const groupLabel = "oblivistore/group"

// Apply implements Machine: it applies the entry, lean (lean); the
// shuffler runs on the Front's Progress and after a storage completion
// (runShuffler).
func (c *GroupMachine) Apply(e GroupEntry) ([]GroupOutput, error) {
	return c.apply(c.lean(e))
}

// apply is Apply of an entry already lean (Core.applyGroup leans it to
// journal it).
func (c *GroupMachine) apply(e GroupEntry) ([]GroupOutput, error) {
	c.out = c.out[:0]
	s := &c.st.Group
	var err error
	switch {
	case e.Msg != nil:
		if e.Msg.Group != Node(s.Index) {
			return nil, internal("group %d was sent a message for group %d", s.Index, e.Msg.Group)
		}
		c.st.Out.acked(e.Msg.Ack)
		if e.Msg.ID.Seq == 0 {
			return c.out, nil
		}
		for _, m := range c.st.From.accept(e.Msg.ID, e.Msg.Msg) {
			if err = s.handle(c, m); err != nil {
				break
			}
			if m.Progress != nil {
				c.runShuffler()
			}
		}
		if !c.told() {
			c.ack()
		}
	case e.Read != nil:
		err = s.readDone(c, *e.Read)
		c.runShufflerUnlessTold()
	case e.Write != nil:
		s.writeDone(*e.Write)
		c.runShufflerUnlessTold()
	case e.Reseed != nil:
		c.sec.reseed(e.Reseed.Seed, groupLabel)
		c.st.Incarnation = max(c.st.Incarnation, e.Reseed.Incarnation)
	case e.Resend != nil:
		err = c.resend()
	default:
		err = errors.New("oblivistore: empty group entry")
	}
	if err != nil {
		return nil, err
	}
	return c.out, nil
}

// lean returns e, a read result's value of every real block the group
// does not keep (Group.keeps) replaced by zeros of its length: a block no
// storage cache and no request waits for, or one for a request that
// overwrites it blind, whose Front drops it (FrontMachine.lean). The
// group logs its reads lean (Core.applyGroup), where zeros take only
// their length (appendInput), and applies them lean, so that its state
// and messages are those its log rebuilds, and a message to the Front
// is as long as before.
func (c *GroupMachine) lean(e GroupEntry) GroupEntry {
	if e.Read == nil {
		return e
	}
	s := &c.st.Group
	io, ok := s.Reads[e.Read.ID]
	if !ok || len(e.Read.Blocks) != len(io.Slots) {
		return e
	}
	var lean []Block
	for i, x := range io.Slots {
		lv, b := s.level(x), e.Read.Blocks[i]
		if !b.Real || !lv.Real[x.S] || s.keeps(x, lv.Keys[x.S]) || zeros(b.Val) {
			continue
		}
		if lean == nil {
			lean = slices.Clone(e.Read.Blocks)
		}
		lean[i].Val = make([]byte, len(b.Val))
	}
	if lean != nil {
		d := *e.Read
		d.Blocks = lean
		e.Read = &d
	}
	return e
}

// runShuffler lets the shuffler run (the Front's Progress, which ends
// each of the Front's entries, asks for it) until it can do nothing
// more, or until it has asked the Front for a job's blocks (Fetch): the
// Front lets in the requests the evictions it returns release, and its
// Progress lets the shuffler go on, so those requests may read the levels
// the shuffler has just marked (early cache-ins).
func (c *GroupMachine) runShuffler() {
	s := &c.st.Group
	for c.fetched = false; s.shuffle(c) && !c.fetched; {
	}
}

// runShufflerUnlessTold runs the shuffler after a storage completion,
// unless the completion sent the Front a message: the Front's Progress
// then runs it, once the Front has taken the message in.
func (c *GroupMachine) runShufflerUnlessTold() {
	if !c.told() {
		c.runShuffler()
	}
}

// told reports whether the entry being applied has sent the Front a
// message.
func (c *GroupMachine) told() bool {
	return slices.ContainsFunc(c.out, func(o GroupOutput) bool { return o.Msg != nil })
}

// sendFront sends the Front a message.
func (c *GroupMachine) sendFront(m FrontMsg) {
	c.st.Sent++
	id := MsgID{From: Node(c.st.Group.Index), Incarnation: c.st.Incarnation, Seq: c.st.Sent}
	msg := &ToFront{ID: id, Ack: c.st.From.handed(), Msg: m}
	c.st.Out.hold(id.Seq, AppendFrontEntry(nil, FrontEntry{Msg: msg}))
	c.out = append(c.out, GroupOutput{Msg: msg})
}

// ack acknowledges the Front's messages handed on so far: a message with
// no content and sequence number 0, which is never held or handed on.
// An entry that sends the Front a message needs none: the message
// carries the acknowledgement.
func (c *GroupMachine) ack() {
	id := MsgID{From: Node(c.st.Group.Index), Incarnation: c.st.Incarnation}
	c.out = append(c.out, GroupOutput{Msg: &ToFront{ID: id, Ack: c.st.From.handed()}})
}

// resend sends the Front again every message it has not acknowledged,
// with its first id and the latest acknowledgement.
func (c *GroupMachine) resend() error {
	for _, b := range c.st.Out.pending() {
		e, err := DecodeFrontEntry(b)
		if err != nil || e.Msg == nil {
			return internal("a message held for the Front does not decode: %v", err)
		}
		e.Msg.Ack = c.st.From.handed()
		c.out = append(c.out, GroupOutput{Msg: e.Msg})
	}
	return nil
}

// Snapshot implements Machine.
func (c *GroupMachine) Snapshot() ([]byte, error) {
	var err error
	if c.st.Sec, err = c.sec.marshal(); err != nil {
		return nil, err
	}
	b, err := encodeState(&c.st)
	c.st.Sec = nil
	return b, err
}

// Restore implements Machine; the test hooks stay.
func (c *GroupMachine) Restore(b []byte) error {
	var st groupState
	if err := decodeState(b, &st); err != nil {
		return err
	}
	sec, err := restoreSource(st.Sec)
	if err != nil {
		return err
	}
	st.Sec = nil
	st.Group.fill()
	if st.From.Held == nil {
		st.From.Held = sorted[uint64, PartitionMsg]{}
	}
	if st.Out.Unacked == nil {
		st.Out = newOutbox()
	}
	c.st, c.sec = st, sec
	return nil
}
