package oblivistore

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/random"
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
	// Reseed mixes fresh randomness into the core's source. The driver
	// journals one at every open, so work lost in a crash is never redone
	// with the same random choices.
	Reseed *[32]byte
}

// Request is a client operation's arrival.
type Request struct {
	Op  OpKind
	Key string
	Val []byte // the mutation's Arg
	// If and ReturnOld are the rest of the kv.Mutation.
	If        kv.Condition
	ReturnOld bool
}

// ReadDone is the result of a ReadIO: Blocks[i] is the content of Slots[i].
type ReadDone struct {
	ID     uint64
	Blocks []Block
}

// WriteDone reports a WriteIO applied.
type WriteDone struct{ ID uint64 }

// Output is one output of the core; exactly one field is set.
type Output struct {
	Read  *ReadIO
	Write *WriteIO
	Reply *Reply
}

// ReadIO asks the driver to read Slots, each sealed under its level's
// nonce.
type ReadIO struct {
	ID     uint64
	Slots  []Slot
	Nonces []uint64
}

// WriteIO asks the driver to write Blocks to Slots in one atomic call.
type WriteIO struct {
	ID     uint64
	Slots  []Slot
	Nonces []uint64
	Blocks []Block
}

// Reply answers the request that arrived Seq-th (from 1).
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

// State is the core's whole state: plain data, so Snapshot can encode it.
type State struct {
	Front  Front
	Server Server
	// Pub and Sec are the random sources' states, in a snapshot only.
	Pub, Sec []byte
}

// Core is ObliviStore's trusted state machine: the ORAM main algorithm
// (Front) and the partitions (Server), which talk only through the
// messages of messages.go. It is a deterministic function of its state
// and inputs; it never does I/O, reads a clock or spawns anything.
//
// It draws from two random sources. pub makes the choices storage may
// learn, and draws the same amount per access whatever the workload: the
// evictions each access schedules and their partitions, and the partition
// an access to a key not on storage reads. sec makes the secret ones: the
// partition a block is assigned to, and every level's layout. Two
// workloads of equal length then see the same public coins.
type Core struct {
	st       State
	pubSrc   *rand.ChaCha8
	secSrc   *rand.ChaCha8
	pub, sec *rand.Rand
	out      []Output
	toParts  []PartitionMsg
	toFront  []FrontMsg
	shuffled bool // the shuffler moved on the last Progress
	// trace is TestingKnobs.Trace (tests only).
	trace trace
	// wire is TestingKnobs.Wire (tests only).
	wire bool
	// forced, tests only, replaces the partitions that accesses to keys
	// not on storage read, in order: a simulator replays the partitions
	// storage saw (export_test.go).
	forced []int32
}

// NewCore returns the core of an empty store of capacity n.
func NewCore(n int, o Options, seed [32]byte) *Core {
	g := o.geometry(n)
	c := &Core{st: State{Front: newFront(n, g, o), Server: newServer(g, o)}}
	c.seed(seed)
	c.setHooks(o)
	return c
}

// seed derives both sources from seed.
func (c *Core) seed(seed [32]byte) {
	c.pubSrc = random.Labeled(seed, "oblivistore/pub")
	c.secSrc = random.Labeled(seed, "oblivistore/sec")
	c.pub, c.sec = rand.New(c.pubSrc), rand.New(c.secSrc)
}

func (c *Core) reseed(seed [32]byte) {
	var mixed [32]byte
	c.secSrc.Read(mixed[:])
	for i := range mixed {
		mixed[i] ^= seed[i]
	}
	c.seed(mixed)
}

// Step applies one input and returns the outputs it causes, valid until
// the next call. An error leaves the core unusable: storage was tampered
// with, or an invariant broke.
func (c *Core) Step(in Input) ([]Output, error) {
	c.out = c.out[:0]
	var err error
	switch {
	case in.Request != nil:
		c.front().arrive(c, *in.Request)
	case in.Read != nil:
		err = c.server().readDone(c, *in.Read)
	case in.Write != nil:
		err = c.server().writeDone(c, *in.Write)
	case in.Reseed != nil:
		c.reseed(*in.Reseed)
	default:
		err = errors.New("oblivistore: empty input")
	}
	if err == nil {
		err = c.progress()
	}
	return c.out, err
}

func (c *Core) front() *Front   { return &c.st.Front }
func (c *Core) server() *Server { return &c.st.Server }

// progress delivers messages and lets the front admit and answer requests
// and the shuffler run, until nothing more moves.
func (c *Core) progress() error {
	for {
		if err := c.route(); err != nil {
			return err
		}
		f := c.front()
		moved := f.admit(c)
		moved = f.answer(c) || moved
		c.shuffled = false
		c.sendParts(PartitionMsg{Progress: &Progress{Bypass: f.blocked()}})
		if err := c.route(); err != nil {
			return err
		}
		if !moved && !c.shuffled {
			return nil
		}
	}
}

// setHooks takes the test-only options.
func (c *Core) setHooks(o Options) {
	c.trace, c.wire = o.TestingKnobs.Trace, o.TestingKnobs.Wire
}

// route delivers the queued messages, in order, until none is left.
func (c *Core) route() error {
	for len(c.toParts) > 0 || len(c.toFront) > 0 {
		if err := deliver(c, &c.toParts, c.server().handle); err != nil {
			return err
		}
		if err := deliver(c, &c.toFront, c.front().handle); err != nil {
			return err
		}
	}
	return nil
}

// deliver hands the messages of queue q to handle, in order, until q is
// empty (handle may queue more).
func deliver[M any](c *Core, q *[]M, handle func(*Core, M) error) error {
	for len(*q) > 0 {
		m, err := crossed(c, (*q)[0])
		if err != nil {
			return err
		}
		*q = (*q)[1:]
		if err := handle(c, m); err != nil {
			return err
		}
	}
	return nil
}

// crossed returns m as it arrives on the other side: under TestingKnobs.Wire,
// a fresh value decoded from m's gob encoding, sharing no memory with it.
func crossed[M any](c *Core, m M) (M, error) {
	if !c.wire {
		return m, nil
	}
	var buf bytes.Buffer
	var out M
	if err := gob.NewEncoder(&buf).Encode(m); err != nil {
		return out, err
	}
	err := gob.NewDecoder(&buf).Decode(&out)
	return out, err
}

// sendParts and sendFront queue a message across the boundary.
func (c *Core) sendParts(m PartitionMsg) { c.toParts = append(c.toParts, m) }
func (c *Core) sendFront(m FrontMsg)     { c.toFront = append(c.toFront, m) }

// NextSeq is the sequence number the next request will get.
func (c *Core) NextSeq() uint64 { return c.st.Front.NextSeq + 1 }

// Sems returns the four semaphores.
func (c *Core) Sems() Semaphores {
	return Semaphores{Early: c.st.Front.Early, Evictions: c.st.Front.Evictions,
		Buffer: c.st.Server.Buffer, IO: c.st.Server.IO}
}

// Idle reports whether no request is waiting or unanswered and no I/O is
// outstanding: the state a clean shutdown checkpoints.
func (c *Core) Idle() bool {
	f, s := c.front(), c.server()
	return len(f.Waiting) == 0 && len(f.Active) == 0 && len(s.Reads) == 0 && len(s.Writes) == 0
}

// Outstanding returns the I/O issued and not completed, in issue order:
// what a driver reissues after restoring the core.
func (c *Core) Outstanding() []Output {
	s := c.server()
	ids := make([]uint64, 0, len(s.Reads)+len(s.Writes))
	for id := range s.Reads {
		ids = append(ids, id)
	}
	for id := range s.Writes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	outs := make([]Output, len(ids))
	for i, id := range ids {
		outs[i] = Output{Read: s.Reads[id], Write: s.Writes[id]}
	}
	return outs
}

// randomPart draws a block's secret partition.
func (c *Core) randomPart() int32 { return int32(c.sec.IntN(c.st.Front.Partitions)) }

// publicPart draws a public coin: a partition.
func (c *Core) publicPart() int32 { return int32(c.pub.IntN(c.st.Front.Partitions)) }

// drawEvictions draws how many evictions an access schedules: nu, or for
// a fractional nu its floor and one more with probability nu - floor(nu).
func (c *Core) drawEvictions(nu float64) int32 {
	e := int32(nu)
	if frac := nu - math.Floor(nu); frac > 0 && c.pub.Float64() < frac {
		e++
	}
	return e
}

// internal reports a broken invariant.
func internal(format string, args ...any) error {
	return fmt.Errorf("oblivistore: "+format, args...)
}
