package oblivistore

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/random"
	"github.com/oblivkv/oblivkv/seal"
)

// OpKind is a client operation: a kv mutation, applied to the key's block
// once it is in trusted memory, so that every kind is one partition read.
type OpKind = kv.MutationOp

// The client operations every store has; kv.MutationOp has the others.
const (
	OpGet    = kv.MutRead
	OpPut    = kv.MutSet
	OpDelete = kv.MutDelete
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
	// Reseed mixes fresh randomness into every machine's sources and
	// starts a new incarnation. The driver journals one at every open,
	// so work lost in a crash is never redone with the same random
	// choices.
	Reseed *Reseed
}

// Request is a client operation's arrival.
type Request struct {
	// ID names the request: its sequence number of arrival, from 1 (0:
	// the next). A request whose ID the Front has seen is a duplicate,
	// ignored.
	ID  uint64
	Op  OpKind
	Key string
	Val []byte // the mutation's Arg
	// If and ReturnOld are the rest of the kv.Mutation.
	If        kv.Condition
	ReturnOld bool
}

// ReadDone is the result of group Group's ReadIO ID: Blocks[i] is the
// content of Slots[i].
type ReadDone struct {
	Group  int32
	ID     uint64
	Blocks []Block
}

// WriteDone reports group Group's WriteIO ID applied.
type WriteDone struct {
	Group int32
	ID    uint64
}

// Output is one output of the core; exactly one field is set.
type Output struct {
	Read  *ReadIO
	Write *WriteIO
	Reply *Reply
}

// ReadIO asks the driver to read Slots, each sealed under its level's
// nonce, for partition group Group (IDs are the group's).
type ReadIO struct {
	Group  int32
	ID     uint64
	Slots  []Slot
	Nonces []uint64
}

// WriteIO asks the driver to write Blocks to Slots in one atomic call,
// for partition group Group.
type WriteIO struct {
	Group  int32
	ID     uint64
	Slots  []Slot
	Nonces []uint64
	Blocks []Block
}

// Reply answers the request that arrived Seq-th (from 1): the request
// with ID Seq.
type Reply struct {
	Seq    uint64
	Result kv.Result
	Full   bool // a new key in a full store: nothing stored
	// Rejected is the error of a mutation that does not apply to the
	// value (0: none).
	Rejected kv.Rejection
}

// ErrTampered is returned by Step when a slot's content contradicts the
// trusted state (a dummy where a real block was written, or the reverse).
var ErrTampered = kv.ErrTampered

// Semaphores are the four semaphores of Sec. V-D. Every change depends
// only on request arrivals, I/O completions and public coins (Invariant
// 1). Early and Evictions belong to the ORAM main algorithm, Buffer and IO
// to the shuffler.
type Semaphores struct {
	Early, Buffer, Evictions, IO int64
}

// Core is ObliviStore's trusted state in one process: the Front and the
// partition groups, each a Machine, with the messages between them
// routed in order as they are sent. It is a deterministic function of
// its state and inputs; it never does I/O, reads a clock or spawns
// anything.
type Core struct {
	front    *FrontMachine
	groups   []*GroupMachine
	out      []Output
	entries  []Applied
	toGroups []ToGroup
	toFront  []ToFront
	// wire, under TestingKnobs.Wire (tests only), seals every message
	// as it crosses, as between processes.
	wire *seal.Keys
}

// Applied is one entry a machine applied, encoded for its own log
// (AppendFrontEntry, AppendGroupEntry).
type Applied struct {
	Machine Node
	Entry   []byte
}

// NewCore returns the core of an empty store of capacity n.
func NewCore(n int, o Options, seed [32]byte) *Core {
	g := o.geometry(n)
	c := &Core{front: newFrontMachine(n, g, o, machineSeed(seed, FrontNode))}
	for i := range g.Groups {
		c.groups = append(c.groups, newGroupMachine(g, o, int32(i), machineSeed(seed, Node(i))))
	}
	c.setHooks(o, nil)
	return c
}

// machineSeed derives machine m's seed from the core's.
func machineSeed(seed [32]byte, m Node) [32]byte {
	return random.Draw(random.Labeled(seed, fmt.Sprint("oblivistore/machine/", m)))
}

// Step applies one input and returns the outputs it causes, valid until
// the next call. An error leaves the core unusable: storage was tampered
// with, or an invariant broke.
func (c *Core) Step(in Input) ([]Output, error) {
	c.out, c.entries = c.out[:0], c.entries[:0]
	var err error
	switch {
	case in.Request != nil:
		err = c.applyFront(FrontEntry{Request: in.Request})
	case in.Read != nil:
		err = c.applyGroup(in.Read.Group, GroupEntry{Read: in.Read})
	case in.Write != nil:
		err = c.applyGroup(in.Write.Group, GroupEntry{Write: in.Write})
	case in.Reseed != nil:
		err = c.reseed(*in.Reseed)
	default:
		err = errors.New("oblivistore: empty input")
	}
	if err == nil {
		err = c.route()
	}
	return c.out, err
}

// Entries returns the entries each machine applied in the last Step or
// Deliver, in the order they were applied, valid until the next call: what
// each machine's log holds (a machine replays its own alone). An
// acknowledgement alone is not among them: it changes nothing but its
// receiver's Outbox, which in one process every Step empties (each
// message is acknowledged within the Step that sent it), and Deliver
// empties again after a replay.
func (c *Core) Entries() []Applied { return c.entries }

// Deliver routes messages their senders sent and their receivers never
// took in (a crash kept their entries from the receivers' logs, after the
// senders'), as Step routes a step's, and returns the outputs they
// cause. A message its receiver has taken in, or holds, is passed over.
// Last, the Front's Outbox forgets what each group has taken in: the
// groups' acknowledgements alone, which no log holds. (The Progress that
// ends every entry of the Front acknowledges a group's messages, and is
// in the group's log or delivered here.)
func (c *Core) Deliver(toGroups []ToGroup, toFront []ToFront) ([]Output, error) {
	c.out, c.entries = c.out[:0], c.entries[:0]
	for _, m := range toGroups {
		if int(m.Group) < len(c.groups) && c.groups[m.Group].st.From.lacks(m.ID) {
			c.toGroups = append(c.toGroups, m)
		}
	}
	for _, m := range toFront {
		if int(m.ID.From) < len(c.front.st.From) && c.front.st.From[m.ID.From].lacks(m.ID) {
			c.toFront = append(c.toFront, m)
		}
	}
	if err := c.route(); err != nil {
		return c.out, err
	}
	for g, gm := range c.groups {
		c.front.st.Out[g].acked(gm.st.From.handed())
	}
	return c.out, nil
}

// reseed reseeds every machine, each from its own share of r.Seed.
func (c *Core) reseed(r Reseed) error {
	if err := c.applyFront(FrontEntry{Reseed: &Reseed{Seed: machineSeed(r.Seed, FrontNode), Incarnation: r.Incarnation}}); err != nil {
		return err
	}
	for g := range c.groups {
		if err := c.applyGroup(int32(g), GroupEntry{Reseed: &Reseed{Seed: machineSeed(r.Seed, Node(g)), Incarnation: r.Incarnation}}); err != nil {
			return err
		}
	}
	return nil
}

// applyFront applies an entry to the Front and takes its outputs.
func (c *Core) applyFront(e FrontEntry) error {
	e = c.front.lean(e)
	if e.Msg == nil || e.Msg.ID.Seq != 0 { // an acknowledgement alone is not journaled (Entries)
		c.entries = append(c.entries, Applied{FrontNode, AppendFrontEntry(nil, e)})
	}
	outs, err := c.front.apply(e)
	for _, o := range outs {
		if o.Reply != nil {
			c.out = append(c.out, Output{Reply: o.Reply})
		} else {
			c.toGroups = append(c.toGroups, *o.Msg)
		}
	}
	return err
}

// applyGroup applies an entry to group g and takes its outputs.
func (c *Core) applyGroup(g int32, e GroupEntry) error {
	if g < 0 || int(g) >= len(c.groups) {
		return internal("input for unknown group %d", g)
	}
	e = c.groups[g].lean(e)
	if e.Msg == nil || e.Msg.ID.Seq != 0 { // an acknowledgement alone is not journaled (Entries)
		c.entries = append(c.entries, Applied{Node(g), AppendGroupEntry(nil, e)})
	}
	outs, err := c.groups[g].apply(e)
	for _, o := range outs {
		switch {
		case o.Msg != nil:
			c.toFront = append(c.toFront, *o.Msg)
		default:
			c.out = append(c.out, Output{Read: o.Read, Write: o.Write})
		}
	}
	return err
}

// setHooks takes the test-only options; keys are the store's, for
// TestingKnobs.Wire.
func (c *Core) setHooks(o Options, keys *seal.Keys) {
	if o.TestingKnobs.Wire {
		c.wire = keys
	}
	c.front.trace = o.TestingKnobs.Trace
	for _, g := range c.groups {
		g.trace = o.TestingKnobs.Trace
	}
}

// route delivers the queued messages, in order, until none is left.
func (c *Core) route() error {
	for len(c.toGroups) > 0 || len(c.toFront) > 0 {
		for len(c.toGroups) > 0 {
			m, err := crossed(c.wire, c.toGroups[0], SealToGroup, OpenToGroup)
			if err != nil {
				return err
			}
			c.toGroups = c.toGroups[1:]
			if err := c.applyGroup(int32(m.Group), GroupEntry{Msg: &m}); err != nil {
				return err
			}
		}
		for len(c.toFront) > 0 {
			m, err := crossed(c.wire, c.toFront[0], SealToFront, OpenToFront)
			if err != nil {
				return err
			}
			c.toFront = c.toFront[1:]
			if err := c.applyFront(FrontEntry{Msg: &m}); err != nil {
				return err
			}
		}
	}
	return nil
}

// crossed returns m as it arrives on the other side: with keys (under
// TestingKnobs.Wire), sealed and opened again, a fresh value sharing no
// memory with m.
func crossed[M any](keys *seal.Keys, m M, sealIt func(*seal.Keys, M) (Sealed, error), open func(*seal.Keys, Sealed) (M, error)) (M, error) {
	if keys == nil {
		return m, nil
	}
	s, err := sealIt(keys, m)
	if err != nil {
		return m, err
	}
	return open(keys, s)
}

// NextSeq is the sequence number the next request will get.
func (c *Core) NextSeq() uint64 { return c.front.st.Front.NextSeq + 1 }

// Groups is the number of partition groups the core holds.
func (c *Core) Groups() int { return len(c.groups) }

// Incarnation is the incarnation the core's machines last started.
func (c *Core) Incarnation() uint64 { return c.front.st.Incarnation }

// Sems returns the four semaphores; a group's Buffer and IO are summed
// over the groups.
func (c *Core) Sems() Semaphores {
	f := &c.front.st.Front
	sem := Semaphores{Early: f.Early, Evictions: f.Evictions}
	for _, g := range c.groups {
		sem.Buffer += g.st.Group.Buffer
		sem.IO += g.st.Group.IO
	}
	return sem
}

// Idle reports whether no request is waiting or unanswered and no I/O is
// outstanding: the state a clean shutdown checkpoints.
func (c *Core) Idle() bool {
	f := &c.front.st.Front
	if len(f.Waiting) > 0 || len(f.Active) > 0 {
		return false
	}
	for _, g := range c.groups {
		if len(g.st.Group.Reads) > 0 || len(g.st.Group.Writes) > 0 {
			return false
		}
	}
	return true
}

// Outstanding returns the I/O issued and not completed, group by group
// in issue order: what a driver reissues after restoring the core.
func (c *Core) Outstanding() []Output {
	var outs []Output
	for _, g := range c.groups {
		for _, o := range g.outstanding() {
			outs = append(outs, Output{Read: o.Read, Write: o.Write})
		}
	}
	return outs
}

// outstanding returns the group's I/O issued and not completed, in issue
// order.
func (c *GroupMachine) outstanding() []GroupOutput {
	s := &c.st.Group
	ids := slices.Collect(maps.Keys(s.Reads))
	ids = slices.AppendSeq(ids, maps.Keys(s.Writes))
	slices.Sort(ids)
	outs := make([]GroupOutput, 0, len(ids))
	for _, id := range ids {
		outs = append(outs, GroupOutput{Read: s.Reads[id], Write: s.Writes[id]})
	}
	return outs
}

// internal reports a broken invariant.
func internal(format string, args ...any) error {
	return fmt.Errorf("oblivistore: "+format, args...)
}
