package treebeard

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// One tree of an ORAM shard as a machine a log can drive: every input of
// the tree (a Stash shard's part of an epoch, an epoch's timer firing,
// the blocks and answers of the Stash shards in an eviction, what storage
// returned, the journal's acknowledgement) is an oramEntry, applied in
// the order its driver (treeWorker) logs them, and apply returns
// everything the entry makes the tree do: the storage Reads and the Write
// it issues, the parts it answers, its messages to the Stash shards, its
// journal records. The machine is a tree, not a shard: a shard's trees
// share nothing (each has its own operations, records and fence), so a
// tree is what a log orders; a shard is a set of them. The same image
// and the same entries give the same outputs and the same final image,
// byte for byte, whether the image was taken between operations or with
// Reads or an eviction in flight.
//
// An operation runs in this order, each step waiting for the entry its
// output asks for: the eviction's blocks from every Stash shard (when the
// reads owe an eviction, Treebeard Sec. 5.3.2), the metadata Read (when
// the tree lacks a copy), the slot Read, the journal record of its
// Change, then its answers to the parts, and the report of the
// eviction's placements to every Stash shard, whose answers end it.
//
// With inFlight above 1, an operation may start beside the one in flight
// (ringoram.Tree.Beside) once that one's slot Read is out and half as
// many whole epochs as it carries wait behind it: its Reads go to
// storage at once, and it takes its slots, journals its record and
// answers its parts only once the operations before it have committed.
// Operations are numbered as they begin; a Read's answer names its
// operation (oramEntry.Number).

// oramEntryKind is what an oramEntry brings.
type oramEntryKind uint8

const (
	oramPart      oramEntryKind = iota + 1 // a Stash shard's part of an epoch, message ID: its Reads
	oramAbandon                            // epoch Epoch's timer fired
	oramBlocks                             // Stash shard Shard's blocks for the eviction Number, or its Failure
	oramMetas                              // the metadata records read (Plains) by operation Number, or the Read's Failure
	oramSlots                              // the real blocks operation Number's slot Read brought in (Reals), or its Failure
	oramJournaled                          // the operation's record is journaled, or the journal's Failure
	oramEvicted                            // Stash shard Shard's answer to the eviction's placements: Stale, or its Failure
	oramResume                             // recovery: the operation of Plan, which a crash cut short, runs again
	oramEvict                              // recovery: an eviction of Paths paths owed
	oramRelease                            // the Stash shards journaled the epochs of the parts Released: the blocks read for them are theirs, and the replies are no longer kept
	oramHold                               // the tree's log is due for a checkpoint: start no operation
	oramGo                                 // the checkpoint's snapshot is taken: operations start again
)

// oramEntry is one input of a tree's machine. Only the fields of its
// Kind are set; storage's answers are reduced to what the state needs:
// the metadata plaintexts and the real blocks read, never a sealed slot.
type oramEntry struct {
	Kind     oramEntryKind
	ID       MsgID
	Epoch    uint64
	Shard    int
	Reads    []ringoram.PathRead
	Number   uint64
	Blocks   []ringoram.Block
	Plains   [][]byte
	Reals    [][]tree.Block
	Stale    []Stale
	Plan     ringoram.Plan
	Paths    int
	Released []MsgID
	Failure  Status
}

// oramOutput is what an entry makes the tree do: its replies, its
// timers, and the I/O of its operations (IO), in order.
type oramOutput struct {
	Replies []partReply // parts answered, and copies of parts answered from the record
	Copy    *msgCopy    // the entry's part was handled already: what its copy gets (Pending: the first copy's reply, once it is made)
	Wait    []uint64    // epochs now waiting for a part: start their timers
	Ready   []uint64    // epochs all of whose parts came: stop their timers

	IO      []oramIO
	Evicted []byte // the eviction's end record (Append), before IO

	Trace     []traceEvent
	Ended     bool   // an operation ended
	ReadFail  Status // its reads failed
	EvictFail Status // its eviction failed (some blocks may stay stashed)
	Owed      int    // Ended, oramResume: paths still owed to eviction after it
}

// oramIO is one piece of I/O of operation Op, one of: the Stash shards'
// blocks for its eviction (Ask), its metadata Read (Metas) or slot Read
// (Slots) after Record, its plan, is journaled (Commit), its Write held
// once Record, its own, is journaled (Append), or its eviction's
// placements (Placed). The driver issues the pieces of an output in
// order; with several operations in flight, it issues a Read without
// waiting for its answer. A Write without a Record is what was last
// committed and may not be on storage, issued on its own (outstanding).
type oramIO struct {
	Op     uint64
	Carry  bool   // its Read carries the Writes held (ringoram.Driver.Hold); else it carries none
	Ask    bool   // ask every Stash shard for its blocks of eviction Number
	Number uint64 // the eviction of Ask and Placed
	Record []byte
	Metas  []uint64
	Slots  [][]ringoram.SlotRead
	Write  []ringoram.BucketWrite
	Placed [][]int64          // per Stash shard: where the blocks it handed eviction Number went (-1: stashed)
	Handed [][]ringoram.Block // per Stash shard: the blocks it handed, with Placed
}

// partReply is the answer to one part of an epoch, message ID.
type partReply struct {
	ID      MsgID
	Results []ringoram.ReadResult
	Status  Status
}

// heldPart is a part of an epoch the tree holds.
type heldPart struct {
	ID    MsgID // its sender is the Stash shard, its epoch the epoch's
	Reads []ringoram.PathRead
}

func (p heldPart) epoch() uint64 { return p.ID.Epoch }
func (p heldPart) shard() int    { return p.ID.Sender.Index }

// opStep is where the tree's operation in progress is.
type opStep uint8

const (
	stepBlocks  opStep = iota + 1 // waiting for the Stash shards' blocks
	stepMetas                     // waiting for the metadata Read
	stepSlots                     // waiting for the slot Read
	stepJournal                   // waiting for the journal
	stepEvicted                   // waiting for the Stash shards' answers to the placements
)

// oramOp is an operation of the tree in flight.
type oramOp struct {
	Seq     uint64 // its number: the entries answering its Reads name it
	Beside  bool   // it began beside another
	Plan    ringoram.Plan
	Slots   [][]ringoram.SlotRead // its slot Read, once chosen
	Carries int                   // its next Read carries the first Carries Writes of unflushed (-1: none)
	Early   *oramEntry            // its slot Read's answer, come before the operations before it committed
	Step    opStep
	Parts   []heldPart // the parts it reads, all of whole epochs
	Reads   []ringoram.PathRead
	Counted int // path reads it counts towards eviction
	Paths   int // paths it evicts
	Left    int // path reads since the last eviction once it is done: its record's
	Resumed bool
	Number  uint64
	Handed  [][]ringoram.Block // per Stash shard, once it answered
	Got     int                // Stash shards that answered
	Leaves  []uint64           // the eviction's, for the trace
	Results []ringoram.ReadResult
	Where   []int64
	Stale   []Stale
	Owed    int    // paths owed to eviction once its reads are counted, beyond its own
	Fail    Status // the reads'
	EvFail  Status // the eviction's
	Taken   []handover
}

// handover is a block a read of the tree took out for its Stash shard:
// the tree keeps it, in its state and its log, until the shard has
// journaled the epoch of the part that asked for it (the shard releases
// the part then), so that a crash between the tree's record and the
// shard's loses no block: recovery hands the shards what the trees still
// keep (stashCore.takeBack). A block the tree places again is no longer
// kept: the shard journaled it before it handed it over.
type handover struct {
	Part  MsgID          // the part that asked for it (none: a recovery's read)
	Block ringoram.Block // the block, with the leaf it was read from
}

// oramMachine is one tree's state: its buckets' (ringoram.Tree), its
// schedule (treeCore), the parts it holds and queues, the operations in
// flight, and its record of the parts it handled (msgTable).
type oramMachine struct {
	id       int
	stashes  int
	tree     *ringoram.Tree
	core     *treeCore
	held     []heldPart // parts of epochs not all shards sent yet, in arrival order
	queue    []heldPart // parts of whole epochs, in the order they completed
	ops      []*oramOp  // the operations in flight, in the order they began
	inFlight int        // the most operations in flight at once
	number   uint64     // the last operation's number
	kept     []handover // blocks read for Stash shards that have not journaled them yet
	msgs     msgTable   // the parts handled: their replies until released, and the epochs released
	hold     bool       // a checkpoint is due: no operation starts
	traced   bool       // the driver traces: outputs carry trace events
	// unflushed are the Writes of the operations committed, in order,
	// until a Read that carried them succeeds: the driver holds them and
	// sends them with that Read (or on their own, when the tree is idle),
	// so storage may not hold them yet; an operation beside others
	// avoids their buckets.
	unflushed []ringoram.BucketWrite
	// incarnation is the store's, which the parts' ids and the
	// operations' records carry (set by the driver, and in the image).
	incarnation uint64
}

// apply applies entry e and returns its outputs.
func (m *oramMachine) apply(e oramEntry) oramOutput {
	var out oramOutput
	switch e.Kind {
	case oramPart:
		m.part(e, &out)
	case oramAbandon:
		m.abandon(e.Epoch, &out)
	case oramBlocks:
		m.blocks(e, &out)
	case oramMetas:
		m.metas(e, &out)
	case oramSlots:
		m.slots(e, &out)
	case oramJournaled:
		m.journaled(e, &out)
	case oramEvicted:
		m.evicted(e, &out)
	case oramResume:
		m.tree.Resume(e.Plan)
		m.begin(&oramOp{Reads: e.Plan.Reads, Counted: m.core.counted(e.Plan.Reads), Paths: e.Plan.Evict, Resumed: true}, &out)
	case oramEvict:
		m.begin(&oramOp{Paths: e.Paths, Resumed: true}, &out)
	case oramRelease:
		m.release(e.Released)
	case oramHold, oramGo:
		m.hold = e.Kind == oramHold
	}
	m.takeEarly(&out)
	m.next(&out)
	return out
}

// opOf returns the operation in flight numbered seq, at step, or nil.
func (m *oramMachine) opOf(seq uint64, step opStep) *oramOp {
	for _, op := range m.ops {
		if op.Seq == seq && op.Step == step {
			return op
		}
	}
	return nil
}

// opAt returns the first operation in flight at step, or nil: evictions
// are one at a time, and an operation takes its slots, journals and
// commits only once the ones before it committed.
func (m *oramMachine) opAt(step opStep) *oramOp {
	for _, op := range m.ops {
		if op.Step == step {
			return op
		}
	}
	return nil
}

// idle reports whether no operation is in flight.
func (m *oramMachine) idle() bool { return len(m.ops) == 0 }

// part takes a Stash shard's part of an epoch: its first copy goes to the
// epoch barrier (treeCore.part); a later copy gets the stored reply, or
// the first copy's once it is made, or a refusal once its sender released
// it (msgTable), and is never read again.
func (m *oramMachine) part(e oramEntry, out *oramOutput) {
	if out.Copy = m.msgs.admit(e.ID, kindReadPathsReply); out.Copy != nil {
		if !out.Copy.Pending {
			out.Replies = append(out.Replies, copyReply(e.ID, out.Copy))
		}
		return
	}
	p := heldPart{ID: e.ID, Reads: e.Reads}
	ready, outcome := m.core.part(p.epoch(), p.shard())
	switch outcome {
	case partDuplicate:
		m.answer(failedPart(p, errDuplicatePart), out)
	case partLate:
		m.answer(failedPart(p, fmt.Errorf("treebeard: tree %d gave up epoch %d before Stash shard %d's part came", m.id, p.epoch(), p.shard())), out)
	case partHeld:
		if !slices.ContainsFunc(m.held, func(h heldPart) bool { return h.epoch() == p.epoch() }) {
			out.Wait = append(out.Wait, p.epoch())
		}
		m.held = append(m.held, p)
	case partComplete:
		m.held = append(m.held, p)
		out.Ready = append(out.Ready, p.epoch())
		for _, s := range ready {
			i := slices.IndexFunc(m.held, func(h heldPart) bool { return h.epoch() == p.epoch() && h.shard() == s })
			m.queue = append(m.queue, m.held[i])
			m.held = slices.Delete(m.held, i, i+1)
		}
	}
}

func failedPart(p heldPart, err error) partReply {
	return partReply{ID: p.ID, Status: statusOf(err)}
}

// answer makes reply r to its part, and keeps it, encoded, for the part's
// copies until its sender releases it.
func (m *oramMachine) answer(r partReply, out *oramOutput) {
	m.msgs.answer(r.ID, readPathsReplyCodec.encode(ReadPathsReply{Results: r.Results, Status: r.Status}))
	out.Replies = append(out.Replies, r)
}

// copyReply is what a copy of part id gets: the stored reply, or the
// refusal of a copy of a part released.
func copyReply(id MsgID, cp *msgCopy) partReply {
	if cp.Refused.Code != CodeOK {
		return partReply{ID: id, Status: cp.Refused}
	}
	r := answerOf(readPathsReplyCodec, cp.Reply)
	return partReply{ID: id, Results: r.Results, Status: r.Status}
}

// abandon gives up epoch, if some shard's part of it is still missing
// (treeCore.abandon): the parts that came fail, nothing of it is read.
func (m *oramMachine) abandon(epoch uint64, out *oramOutput) {
	held, missing := m.core.abandon(epoch)
	for _, s := range held {
		i := slices.IndexFunc(m.held, func(h heldPart) bool { return h.epoch() == epoch && h.shard() == s })
		err := fmt.Errorf("treebeard: tree %d gave up epoch %d: no part from Stash shard(s) %v in time", m.id, epoch, missing)
		m.answer(failedPart(m.held[i], err), out)
		m.held = slices.Delete(m.held, i, i+1)
	}
}

// next starts an operation for the parts queued when none is in flight,
// or beside the ones in flight when it may (mayStart) and the tree allows
// it (ringoram.Tree.Beside: at most one eviction, no bucket another
// rewrites, none a Write not yet on storage rewrites): the whole epochs
// waiting are merged into one multi-path read, so paths of concurrent
// epochs share buckets too.
func (m *oramMachine) next(out *oramOutput) {
	for !m.hold && len(m.queue) > 0 && m.mayStart() {
		op := &oramOp{Parts: m.queue}
		for _, p := range op.Parts {
			op.Reads = append(op.Reads, p.Reads...)
		}
		if len(op.Reads) == 0 { // epochs without paths of this tree: nothing to read
			m.queue = nil
			for _, p := range op.Parts {
				m.answer(partReply{ID: p.ID}, out)
			}
			continue
		}
		op.Counted = m.core.counted(op.Reads)
		op.Paths, op.Left = m.core.owesAfter(m.readsBefore(), op.Counted)
		if !m.idle() && !m.tree.Beside(op.Reads, op.Paths, m.unflushed) {
			return // the parts wait for the operations in flight
		}
		m.queue = nil
		m.begin(op, out)
	}
}

// mayStart reports whether an operation may begin now: none is in
// flight, or fewer than inFlight are, each has its slot Read out or is
// past it, and the whole epochs waiting number at least half of those
// the newest carries (so that the two are half an operation apart).
func (m *oramMachine) mayStart() bool {
	if m.idle() {
		return true
	}
	if len(m.ops) >= max(1, m.inFlight) {
		return false
	}
	for _, op := range m.ops {
		if op.Step < stepSlots {
			return false
		}
	}
	return 2*epochsOf(m.queue) >= epochsOf(m.ops[len(m.ops)-1].Parts)
}

// readsBefore returns the path reads since the last eviction once the
// operations in flight are done: an operation beside others counts its
// reads after theirs.
func (m *oramMachine) readsBefore() int {
	if m.idle() {
		return m.core.reads
	}
	return m.ops[len(m.ops)-1].Left
}

// epochsOf returns the number of epochs parts belong to.
func epochsOf(parts []heldPart) int {
	n := 0
	for i, p := range parts {
		if i == 0 || p.epoch() != parts[i-1].epoch() {
			n++
		}
	}
	return n
}

// begin starts op: it asks the Stash shards for their blocks when it
// evicts, else it starts the tree's operation.
func (m *oramMachine) begin(op *oramOp, out *oramOutput) {
	m.number++
	op.Seq, op.Beside, op.Carries = m.number, !m.idle(), -1
	m.ops = append(m.ops, op)
	if len(op.Reads) == 0 {
		op.Left = m.core.reads // what is owed was counted already
	} else if op.Resumed {
		_, op.Left = m.core.owes(op.Counted)
	}
	if op.Paths == 0 {
		m.startTree(op, out)
		return
	}
	op.Step, op.Number = stepBlocks, m.core.nextEviction()
	if m.traced {
		op.Leaves = m.tree.EvictionLeaves(op.Paths)
	}
	op.Handed = make([][]ringoram.Block, m.stashes)
	m.ask(op, out)
}

// blocks takes a Stash shard's blocks for the eviction; once every shard
// answered, the tree's operation starts.
func (m *oramMachine) blocks(e oramEntry, out *oramOutput) {
	op := m.opAt(stepBlocks)
	if op == nil || e.Number != op.Number || e.Shard < 0 || e.Shard >= m.stashes {
		return
	}
	if e.Failure.Code != CodeOK {
		op.EvFail = firstFailure(op.EvFail, e.Failure)
	}
	op.Handed[e.Shard] = e.Blocks
	if op.Got++; op.Got == m.stashes {
		m.startTree(op, out)
	}
}

// offered returns the blocks every Stash shard handed the eviction, in
// shard order.
func (op *oramOp) offered() []ringoram.Block {
	return slices.Concat(op.Handed...)
}

// startTree starts the tree's operation and asks for its first Read,
// after the journal record of its Plan (Treebeard Sec. 5.3.3: the slots
// an operation chose are recorded before it reads them).
func (m *oramMachine) startTree(op *oramOp, out *oramOutput) {
	p, err := m.tree.Start(op.Reads, op.Paths, op.offered())
	if err != nil {
		m.fail(op, statusOf(err), out)
		return
	}
	op.Plan, op.Carries = p, m.carries(op)
	op.Step = stepSlots
	if len(m.tree.MetaReads()) > 0 {
		op.Step = stepMetas
	} else {
		op.Slots = m.tree.SlotReads()
	}
	m.ask(op, out)
	out.IO[len(out.IO)-1].Record = planDelta(m.id, p)
}

// carries returns how many of the Writes committed and not known to be
// on storage op's first Read carries: all of them when no other
// operation is in flight, else all of them unless another's Read in
// flight carries some (-1: none). An operation begun beside another
// reads none of the buckets they rewrite whole and no metadata they
// write (ringoram.Tree.Beside), so no Read beside the one that carries
// them depends on their landing first.
func (m *oramMachine) carries(op *oramOp) int {
	for _, o := range m.ops {
		if o != op && o.Carries >= 0 {
			return -1
		}
	}
	return len(m.unflushed)
}

// metas takes the metadata Read's records and asks for the slot Read.
func (m *oramMachine) metas(e oramEntry, out *oramOutput) {
	op := m.opOf(e.Number, stepMetas)
	if op == nil {
		return
	}
	if e.Failure.Code != CodeOK {
		m.fail(op, e.Failure, out)
		return
	}
	m.readDone(op)
	if err := m.tree.LearnMetas(e.Plains); err != nil {
		m.fail(op, statusOf(err), out)
		return
	}
	op.Step, op.Slots = stepSlots, m.tree.SlotReads()
	m.ask(op, out)
}

// readDone notes that a Read of op succeeded: the Writes it carried are
// on storage.
func (m *oramMachine) readDone(op *oramOp) {
	if op.Carries < 0 {
		return
	}
	m.unflushed = m.unflushed[op.Carries:]
	if len(m.unflushed) == 0 {
		m.unflushed = nil
	}
	op.Carries = -1
}

// slots takes the slot Read's real blocks: the operation's Write is
// sealed and held by the driver once its record is journaled. An
// operation begun beside others keeps its answer until they committed.
func (m *oramMachine) slots(e oramEntry, out *oramOutput) {
	op := m.opOf(e.Number, stepSlots)
	if op == nil {
		return
	}
	if e.Failure.Code != CodeOK {
		m.fail(op, e.Failure, out)
		return
	}
	m.readDone(op)
	if !m.committedBefore(op) {
		op.Early = &e
		return
	}
	w, err := m.tree.LearnSlots(e.Reals)
	if err != nil {
		m.fail(op, statusOf(err), out)
		return
	}
	op.Results, op.Where = w.Results, w.Where
	op.Taken = op.handovers(m.id, m.incarnation)
	op.Step = stepJournal
	m.ask(op, out)
}

// committedBefore reports whether every operation in flight before op
// has committed (it waits for its eviction's end, or has ended).
func (m *oramMachine) committedBefore(op *oramOp) bool {
	for _, o := range m.ops {
		if o == op {
			return true
		}
		if o.Step != stepEvicted {
			return false
		}
	}
	return false
}

// journaled commits the operation once its record is journaled, answers
// its parts and reports the eviction's placements.
func (m *oramMachine) journaled(e oramEntry, out *oramOutput) {
	op := m.opAt(stepJournal)
	if op == nil {
		return
	}
	if e.Failure.Code != CodeOK {
		m.fail(op, e.Failure, out)
		return
	}
	w := m.tree.Pending()
	if err := m.tree.Commit(); err != nil {
		m.fail(op, statusOf(err), out)
		return
	}
	m.unflushed = append(m.unflushed, w.Buckets...)
	owed := m.core.served(op.Counted)
	off := 0
	for _, p := range op.Parts {
		m.answer(partReply{ID: p.ID, Results: op.Results[off : off+len(p.Reads)]}, out)
		off += len(p.Reads)
	}
	if m.traced && len(op.Parts) > 0 {
		out.Trace = append(out.Trace, readTrace(m.id, op.Parts))
	}
	op.Owed = owed - op.Paths
	m.handOver(op.Taken, op.placed())
	m.place(op, op.Where, out)
}

// takeEarly gives the first operation in flight still at its slot Read
// the answer that came early, now that those before it committed.
func (m *oramMachine) takeEarly(out *oramOutput) {
	op := m.opAt(stepSlots)
	if op == nil || op.Early == nil || !m.committedBefore(op) {
		return
	}
	e := *op.Early
	op.Early = nil
	m.slots(e, out)
}

// handovers returns the blocks the reads found, in their order, each
// with the part that asked for it.
func (op *oramOp) handovers(t int, incarnation uint64) []handover {
	parts := op.Parts
	if parts == nil { // a recovery's read: no part asked for it
		parts = []heldPart{{Reads: op.Reads}}
	}
	var out []handover
	off := 0
	for _, p := range parts {
		for i, r := range p.Reads {
			if res := op.Results[off+i]; r.Real && res.Found {
				h := handover{Block: ringoram.Block{Block: res.Block, Leaf: r.Leaf}}
				if op.Parts != nil {
					h.Part = MsgID{Sender: Endpoint{LayerStash, p.shard()}, Incarnation: incarnation, Epoch: p.epoch(), Seq: uint64(t)}
				}
				out = append(out, h)
			}
		}
		off += len(p.Reads)
	}
	return out
}

// placed returns the blocks the operation's eviction placed.
func (op *oramOp) placed() []tree.BlockID {
	var ids []tree.BlockID
	for i, b := range op.offered() {
		if op.Where[i] >= 0 {
			ids = append(ids, b.Block.ID)
		}
	}
	return ids
}

// handOver keeps the blocks an operation took out for their Stash
// shards, and forgets those kept of the blocks it placed.
func (m *oramMachine) handOver(taken []handover, placed []tree.BlockID) {
	m.kept = slices.DeleteFunc(m.kept, func(h handover) bool { return slices.Contains(placed, h.Block.Block.ID) })
	m.kept = append(m.kept, taken...)
}

// release forgets the replies to parts whose epochs their Stash shards
// journaled, and the blocks read for them.
func (m *oramMachine) release(parts []MsgID) {
	for _, id := range parts {
		m.msgs.release(id)
	}
	m.kept = slices.DeleteFunc(m.kept, func(h handover) bool { return h.Part != MsgID{} && slices.Contains(parts, h.Part) })
}

// fail ends op's reads with st: the tree's operation, if a step left one
// in progress, is given up unwritten, its parts fail, and the blocks its
// eviction was handed all stay stashed. Its reads still count towards
// eviction when an operation began beside it, which counted them.
func (m *oramMachine) fail(op *oramOp, st Status, out *oramOutput) {
	m.tree.Discard(op.Plan)
	op.Fail = st
	if m.ops[len(m.ops)-1] != op && len(op.Reads) > 0 {
		m.core.served(op.Counted)
	}
	for _, p := range op.Parts {
		m.answer(partReply{ID: p.ID, Status: st}, out)
	}
	m.place(op, nil, out)
}

// place reports the eviction's placements (where, nil when it failed:
// every block stays stashed) to every Stash shard, or ends an operation
// that evicts nothing.
func (m *oramMachine) place(op *oramOp, where []int64, out *oramOutput) {
	if op.Paths == 0 {
		m.end(op, out)
		return
	}
	if where == nil {
		where = slices.Repeat([]int64{-1}, len(op.offered()))
		if op.Fail.Code != CodeOK {
			op.EvFail = firstFailure(op.EvFail, op.Fail)
		}
	} else if m.traced {
		out.Trace = append(out.Trace, traceEvent{Kind: traceEvict, Tree: m.id, Leaves: op.Leaves})
	}
	op.Where, op.Step, op.Got = where, stepEvicted, 0
	m.ask(op, out)
}

// ask adds to out the I/O the operation in progress waits for at its
// step: the Stash shards' blocks for its eviction, the metadata Read, the
// slot Read, the journal record of its Change with its Write, or its
// eviction's placements. Its steps ask for it as they begin, and a driver
// taking over the machine asks for it again (outstanding).
func (m *oramMachine) ask(op *oramOp, out *oramOutput) {
	io := oramIO{Op: op.Seq, Carry: op.Carries >= 0}
	switch op.Step {
	case stepBlocks:
		io.Ask, io.Number = true, op.Number
	case stepMetas:
		io.Metas = m.tree.MetaReads()
	case stepSlots:
		io.Slots = op.Slots
	case stepJournal:
		w := m.tree.Pending()
		io.Record = appendHandovers(opDelta(m.id, op.Left, w.Change), m.incarnation, op.Taken)
		io.Write = w.Buckets
	case stepEvicted:
		io.Number, io.Placed, io.Handed = op.Number, make([][]int64, m.stashes), op.Handed
		off := 0
		for i, h := range op.Handed {
			io.Placed[i] = op.Where[off : off+len(h)]
			off += len(h)
		}
	}
	out.IO = append(out.IO, io)
}

// outstanding returns what a driver taking over the machine from its
// image issues again: first, when no Read that carried them has
// succeeded since they were committed, the Writes that may not be on
// storage (unflushed; a Write without a record, to issue on its own,
// before any Read), then the I/O each operation in flight waits for, as
// the step that waits for it asked for it (ask), but a Read already
// answered. A Read cut short is issued again with the slots it chose
// (Treebeard Sec. 5.3.3); the Stash shards answer copies of an
// eviction's messages from their record (msgTable); a Write storage
// already holds is written again with the versions it has, and no later
// Write can have superseded it, since a later one follows a Read that
// carried it or avoids its buckets. Its Wait names the epochs waiting
// for a part, whose timers start again.
func (m *oramMachine) outstanding() oramOutput {
	var out oramOutput
	if m.unflushed != nil {
		out.IO = append(out.IO, oramIO{Write: m.unflushed})
	}
	for _, op := range m.ops {
		if op.Early == nil {
			m.ask(op, &out)
		}
	}
	for _, p := range m.held {
		if !slices.Contains(out.Wait, p.epoch()) {
			out.Wait = append(out.Wait, p.epoch())
		}
	}
	return out
}

// evicted takes a Stash shard's answer to the placements: the copies it
// reports stale are forgotten once every shard answered, and the
// eviction's end is recorded.
func (m *oramMachine) evicted(e oramEntry, out *oramOutput) {
	op := m.opAt(stepEvicted)
	if op == nil || e.Number != op.Number {
		return
	}
	if e.Failure.Code != CodeOK {
		op.EvFail = firstFailure(op.EvFail, e.Failure)
	}
	op.Stale = append(op.Stale, e.Stale...)
	if op.Got++; op.Got < m.stashes {
		return
	}
	for _, st := range op.Stale {
		m.tree.Forget(st.Bucket, st.ID)
	}
	out.Evicted = treeEvictedDelta(m.id, op.Stale)
	m.end(op, out)
}

// end ends op; a recovery's read that succeeded says what is still owed.
func (m *oramMachine) end(op *oramOp, out *oramOutput) {
	out.Ended, out.ReadFail, out.EvictFail = true, op.Fail, op.EvFail
	if op.Resumed && len(op.Reads) > 0 && op.Fail.Code == CodeOK {
		out.Owed = op.Owed
	}
	m.ops = slices.DeleteFunc(m.ops, func(o *oramOp) bool { return o == op })
}

func firstFailure(a, b Status) Status {
	if a.Code != CodeOK {
		return a
	}
	return b
}

// readTrace is a multi-path read of parts: each path, its epoch and the
// block it fetches.
func readTrace(t int, parts []heldPart) traceEvent {
	ev := traceEvent{Kind: traceRead, Tree: t}
	for _, p := range parts {
		for _, r := range p.Reads {
			ev.Leaves, ev.Epochs, ev.Wants = append(ev.Leaves, r.Leaf), append(ev.Epochs, p.epoch()), append(ev.Wants, r.Want)
		}
	}
	return ev
}

// oramImage is a tree machine's whole state, gob-encoded by image.
type oramImage struct {
	Tree        []byte
	Parts       []epochParts
	Abandoned   []uint64
	Reads       int
	Evictions   uint64
	Held        []heldPart
	Queue       []heldPart
	Op          *oramOp // an image of an earlier build: its one operation in flight
	Ops         []*oramOp
	Number      uint64
	Kept        []handover
	Messages    []imageStream
	Hold        bool
	Incarnation uint64
	Unflushed   []ringoram.BucketWrite
}

// epochParts is an epoch not all shards sent their parts of yet.
type epochParts struct {
	Epoch  uint64
	Shards []int
}

// image returns the machine's whole state.
func (m *oramMachine) image() []byte {
	im := oramImage{Tree: m.tree.Image(), Reads: m.core.reads, Evictions: m.core.evictions,
		Held: m.held, Queue: m.queue, Ops: m.ops, Number: m.number, Kept: m.kept, Messages: m.msgs.image(), Hold: m.hold, Incarnation: m.incarnation, Unflushed: m.unflushed, Abandoned: slices.Sorted(maps.Keys(m.core.abandoned))}
	for epoch, shards := range m.core.parts {
		im.Parts = append(im.Parts, epochParts{Epoch: epoch, Shards: shards})
	}
	slices.SortFunc(im.Parts, func(a, b epochParts) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return encodeGob(im)
}

// restoreImage replaces the machine's whole state by an image of a tree
// of the same store.
func (m *oramMachine) restoreImage(b []byte) error {
	var im oramImage
	if err := decodeGob(b, &im); err != nil {
		return fmt.Errorf("treebeard: a tree's image: %w", err)
	}
	if err := m.tree.RestoreImage(im.Tree); err != nil {
		return err
	}
	m.core.parts, m.core.abandoned = map[uint64][]int{}, map[uint64]bool{}
	for _, p := range im.Parts {
		m.core.parts[p.Epoch] = p.Shards
	}
	for _, epoch := range im.Abandoned {
		m.core.abandoned[epoch] = true
	}
	m.core.reads, m.core.evictions = im.Reads, im.Evictions
	if im.Op != nil { // an image of an earlier build, whose every Read carried the Writes held
		im.Op.Carries = -1
		if im.Op.Step == stepMetas || im.Op.Step == stepSlots {
			im.Op.Carries = len(im.Unflushed)
		}
		if im.Op.Step == stepSlots {
			im.Op.Slots = m.tree.SlotReads()
		}
		im.Ops, im.Number = []*oramOp{im.Op}, im.Op.Seq
	}
	m.held, m.queue, m.ops, m.number, m.kept, m.hold, m.incarnation, m.unflushed = im.Held, im.Queue, im.Ops, im.Number, im.Kept, im.Hold, im.Incarnation, im.Unflushed
	m.msgs = msgTableOf(im.Messages)
	return nil
}
