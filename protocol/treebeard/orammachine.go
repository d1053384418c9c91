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
// An operation runs in this order, one at a time, each step waiting for
// the entry its output asks for: the eviction's blocks from every Stash
// shard (when the reads owe an eviction, Treebeard Sec. 5.3.2), the
// metadata Read (when the tree lacks a copy), the slot Read, the journal
// record of its Change, then its answers to the parts, and the report of
// the eviction's placements to every Stash shard, whose answers end it.

// oramEntryKind is what an oramEntry brings.
type oramEntryKind uint8

const (
	oramPart      oramEntryKind = iota + 1 // a Stash shard's part of an epoch, message ID: its Reads
	oramAbandon                            // epoch Epoch's timer fired
	oramBlocks                             // Stash shard Shard's blocks for the eviction Number, or its Failure
	oramMetas                              // the metadata records read (Plains), or the Read's Failure
	oramSlots                              // the real blocks the slot Read brought in (Reals), or its Failure
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

// oramOutput is what an entry makes the tree do. The driver issues its
// I/O in this order: Record (Commit) before Metas, Slots or Write; the
// Write is sealed and goes to storage with the tree's next Read (or on
// its own when the tree is idle).
type oramOutput struct {
	Replies []partReply // parts answered, and copies of parts answered from the record
	Copy    *msgCopy    // the entry's part was handled already: what its copy gets (Pending: the first copy's reply, once it is made)
	Wait    []uint64    // epochs now waiting for a part: start their timers
	Ready   []uint64    // epochs all of whose parts came: stop their timers

	Ask     bool   // ask every Stash shard for its blocks of eviction Number
	Number  uint64 // the eviction of Ask and Placed
	Record  []byte // journal (Commit) before the I/O below
	Metas   []uint64
	Slots   [][]ringoram.SlotRead
	Write   []ringoram.BucketWrite
	Placed  [][]int64          // per Stash shard: where the blocks it handed eviction Number went (-1: stashed)
	Handed  [][]ringoram.Block // per Stash shard: the blocks it handed, with Placed
	Evicted []byte             // the eviction's end record (Append)

	Trace     []traceEvent
	Ended     bool   // an operation ended
	ReadFail  Status // its reads failed
	EvictFail Status // its eviction failed (some blocks may stay stashed)
	Owed      int    // Ended, oramResume: paths still owed to eviction after it
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

// oramOp is the tree's operation in progress.
type oramOp struct {
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
// schedule (treeCore), the parts it holds and queues, the operation in
// progress, and its record of the parts it handled (msgTable).
type oramMachine struct {
	id      int
	stashes int
	tree    *ringoram.Tree
	core    *treeCore
	held    []heldPart // parts of epochs not all shards sent yet, in arrival order
	queue   []heldPart // parts of whole epochs, in the order they completed
	op      *oramOp
	kept    []handover // blocks read for Stash shards that have not journaled them yet
	msgs    msgTable   // the parts handled: their replies until released, and the epochs released
	hold    bool       // a checkpoint is due: no operation starts
	traced  bool       // the driver traces: outputs carry trace events
	// unflushed is the Write of the last operation committed, until a
	// Read after it succeeds: the driver holds it and sends it with that
	// Read (or on its own, when the tree is idle), so storage may not
	// hold it yet.
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
	if m.op == nil {
		m.next(&out)
	}
	return out
}

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

// next starts an operation for the parts queued, if none is in progress:
// the whole epochs waiting are merged into one multi-path read, so paths
// of concurrent epochs share buckets too.
func (m *oramMachine) next(out *oramOutput) {
	for m.op == nil && !m.hold && len(m.queue) > 0 {
		op := &oramOp{Parts: m.queue}
		m.queue = nil
		for _, p := range op.Parts {
			op.Reads = append(op.Reads, p.Reads...)
		}
		if len(op.Reads) == 0 { // epochs without paths of this tree: nothing to read
			for _, p := range op.Parts {
				m.answer(partReply{ID: p.ID}, out)
			}
			continue
		}
		op.Counted = m.core.counted(op.Reads)
		op.Paths, _ = m.core.owes(op.Counted)
		m.begin(op, out)
	}
}

// begin starts op: it asks the Stash shards for their blocks when it
// evicts, else it starts the tree's operation.
func (m *oramMachine) begin(op *oramOp, out *oramOutput) {
	m.op = op
	if len(op.Reads) > 0 {
		_, op.Left = m.core.owes(op.Counted)
	} else {
		op.Left = m.core.reads // what is owed was counted already
	}
	if op.Paths == 0 {
		m.startTree(out)
		return
	}
	op.Step, op.Number = stepBlocks, m.core.nextEviction()
	if m.traced {
		op.Leaves = m.tree.EvictionLeaves(op.Paths)
	}
	op.Handed = make([][]ringoram.Block, m.stashes)
	m.ask(out)
}

// blocks takes a Stash shard's blocks for the eviction; once every shard
// answered, the tree's operation starts.
func (m *oramMachine) blocks(e oramEntry, out *oramOutput) {
	op := m.op
	if op == nil || op.Step != stepBlocks || e.Number != op.Number || e.Shard < 0 || e.Shard >= m.stashes {
		return
	}
	if e.Failure.Code != CodeOK {
		op.EvFail = firstFailure(op.EvFail, e.Failure)
	}
	op.Handed[e.Shard] = e.Blocks
	if op.Got++; op.Got == m.stashes {
		m.startTree(out)
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
func (m *oramMachine) startTree(out *oramOutput) {
	op := m.op
	p, err := m.tree.Start(op.Reads, op.Paths, op.offered())
	if err != nil {
		m.fail(statusOf(err), out)
		return
	}
	out.Record = planDelta(m.id, p)
	op.Step = stepSlots
	if len(m.tree.MetaReads()) > 0 {
		op.Step = stepMetas
	}
	m.ask(out)
}

// metas takes the metadata Read's records and asks for the slot Read.
func (m *oramMachine) metas(e oramEntry, out *oramOutput) {
	if m.op == nil || m.op.Step != stepMetas {
		return
	}
	if e.Failure.Code != CodeOK {
		m.fail(e.Failure, out)
		return
	}
	m.unflushed = nil // it went before the Read
	if err := m.tree.LearnMetas(e.Plains); err != nil {
		m.fail(statusOf(err), out)
		return
	}
	m.op.Step = stepSlots
	m.ask(out)
}

// slots takes the slot Read's real blocks: the operation's Write is
// sealed and held by the driver once its record is journaled.
func (m *oramMachine) slots(e oramEntry, out *oramOutput) {
	op := m.op
	if op == nil || op.Step != stepSlots {
		return
	}
	if e.Failure.Code != CodeOK {
		m.fail(e.Failure, out)
		return
	}
	m.unflushed = nil // it went before the Read
	w, err := m.tree.LearnSlots(e.Reals)
	if err != nil {
		m.fail(statusOf(err), out)
		return
	}
	op.Results, op.Where = w.Results, w.Where
	op.Taken = op.handovers(m.id, m.incarnation)
	op.Step = stepJournal
	m.ask(out)
}

// journaled commits the operation once its record is journaled, answers
// its parts and reports the eviction's placements.
func (m *oramMachine) journaled(e oramEntry, out *oramOutput) {
	op := m.op
	if op == nil || op.Step != stepJournal {
		return
	}
	if e.Failure.Code != CodeOK {
		m.fail(e.Failure, out)
		return
	}
	w := m.tree.Pending()
	if err := m.tree.Commit(); err != nil {
		m.fail(statusOf(err), out)
		return
	}
	m.unflushed = w.Buckets
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
	m.place(op.Where, out)
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

// fail ends the operation's reads with st: the tree's operation, if a
// step left one in progress, is given up unwritten, its parts fail, and
// the blocks its eviction was handed all stay stashed.
func (m *oramMachine) fail(st Status, out *oramOutput) {
	m.tree.Discard()
	m.op.Fail = st
	for _, p := range m.op.Parts {
		m.answer(partReply{ID: p.ID, Status: st}, out)
	}
	m.place(nil, out)
}

// place reports the eviction's placements (where, nil when it failed:
// every block stays stashed) to every Stash shard, or ends an operation
// that evicts nothing.
func (m *oramMachine) place(where []int64, out *oramOutput) {
	op := m.op
	if op.Paths == 0 {
		m.end(out)
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
	m.ask(out)
}

// ask adds to out the I/O the operation in progress waits for at its
// step: the Stash shards' blocks for its eviction, the metadata Read, the
// slot Read, the journal record of its Change with its Write, or its
// eviction's placements. Its steps ask for it as they begin, and a driver
// taking over the machine asks for it again (outstanding).
func (m *oramMachine) ask(out *oramOutput) {
	op := m.op
	switch op.Step {
	case stepBlocks:
		out.Ask, out.Number = true, op.Number
	case stepMetas:
		out.Metas = m.tree.MetaReads()
	case stepSlots:
		out.Slots = m.tree.SlotReads()
	case stepJournal:
		w := m.tree.Pending()
		out.Record = appendHandovers(opDelta(m.id, op.Left, w.Change), m.incarnation, op.Taken)
		out.Write = w.Buckets
	case stepEvicted:
		out.Number, out.Placed, out.Handed = op.Number, make([][]int64, m.stashes), op.Handed
		off := 0
		for i, h := range op.Handed {
			out.Placed[i] = op.Where[off : off+len(h)]
			off += len(h)
		}
	}
}

// outstanding returns what a driver taking over the machine from its
// image issues again: the I/O the operation in progress waits for, as
// the step that waits for it asked for it (ask), and, when no Read has
// succeeded since the last operation committed, that operation's Write
// (unflushed; a Write without a record, to issue on its own, before any
// Read). A Read cut short is issued again with the slots it chose
// (Treebeard Sec. 5.3.3); the Stash shards answer copies of an
// eviction's messages from their record (msgTable); a Write storage
// already holds is written again with the versions it has, and no later
// Write can have superseded it, since a later one follows a Read. Its
// Wait names the epochs waiting for a part, whose timers start again.
func (m *oramMachine) outstanding() oramOutput {
	var out oramOutput
	if m.op != nil {
		m.ask(&out)
	}
	if out.Write == nil {
		out.Write = m.unflushed
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
	op := m.op
	if op == nil || op.Step != stepEvicted || e.Number != op.Number {
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
	m.end(out)
}

// end ends the operation in progress; a recovery's read that succeeded
// says what is still owed.
func (m *oramMachine) end(out *oramOutput) {
	op := m.op
	out.Ended, out.ReadFail, out.EvictFail = true, op.Fail, op.EvFail
	if op.Resumed && len(op.Reads) > 0 && op.Fail.Code == CodeOK {
		out.Owed = op.Owed
	}
	m.op = nil
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
	Op          *oramOp
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
		Held: m.held, Queue: m.queue, Op: m.op, Kept: m.kept, Messages: m.msgs.image(), Hold: m.hold, Incarnation: m.incarnation, Unflushed: m.unflushed, Abandoned: slices.Sorted(maps.Keys(m.core.abandoned))}
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
	m.held, m.queue, m.op, m.kept, m.hold, m.incarnation, m.unflushed = im.Held, im.Queue, im.Op, im.Kept, im.Hold, im.Incarnation, im.Unflushed
	m.msgs = msgTableOf(im.Messages)
	return nil
}
