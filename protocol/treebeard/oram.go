package treebeard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// ORAM is one ORAM shard (Sec. 5.3): the only reader and writer of the
// trees it owns. Each tree has one worker that runs the tree's operations
// one at a time (TestingKnobs.InFlight lets a second start beside the
// one in flight, for tests): multi-path reads of the path reads queued
// for it, and
// after every A path reads of the tree an eviction of the next k paths in
// reverse-lexicographic order (Sec. 5.3.2), fed with the tree's blocks
// from every Stash shard.
type ORAM struct {
	workers map[int]*treeWorker
}

// ReadPaths hands a Stash shard's part of an epoch to the tree it names
// and waits for its results. A copy of a part gets the first copy's
// results (the tree's machine keeps them until the part is released):
// the part is read once.
func (o *ORAM) ReadPaths(m ReadPathsMsg) ReadPathsReply {
	w, st := o.worker(m.Tree)
	if st.Code != CodeOK {
		return ReadPathsReply{Status: st}
	}
	r := w.read(m.ID, m.Reads, m.Release)
	return ReadPathsReply{Results: r.Results, Status: r.Status}
}

// worker returns the worker of tree t, which the shard must own.
func (o *ORAM) worker(t int) (*treeWorker, Status) {
	w, ok := o.workers[t]
	if !ok {
		return nil, Status{Code: CodeUnavailable, Detail: fmt.Sprintf("treebeard: this ORAM shard does not own tree %d", t)}
	}
	return w, Status{}
}

// Admin runs the store's operations on one of the shard's trees
// (AdminState, AdminInit, AdminRestore, AdminStats), while the tree is
// idle for the first three; they read and change the tree's machine
// under the worker's lock. Copies of a message run one after the other.
func (o *ORAM) Admin(m AdminMsg) AdminReply {
	w, st := o.worker(m.Tree)
	if st.Code != CodeOK {
		return AdminReply{Status: st}
	}
	w.admin.Lock()
	defer w.admin.Unlock()
	switch m.Op {
	case AdminState: // storage must hold what the state says it does
		if err := w.flush(context.Background()); err != nil {
			return AdminReply{Status: statusOf(err)}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return AdminReply{State: w.state()}
	case AdminInit:
		w.mu.Lock()
		defer w.mu.Unlock()
		return AdminReply{Status: statusOf(w.tree.Init(context.Background(), m.Placed))}
	case AdminRestore:
		w.mu.Lock()
		defer w.mu.Unlock()
		return AdminReply{Status: statusOf(w.restore(m.State))}
	case AdminStats:
		ws := w.snapshot()
		return AdminReply{Stats: LayerStats{Tree: ws.tree, ReadErrors: ws.readErrors, EvictionErrors: ws.evictionErrors,
			Copies: w.copies.Load(), Held: w.heldReplies()}}
	}
	return unknownAdmin(LayerORAM, m.Op)
}

// state returns the tree's trusted state; w.mu is held, and storage
// holds what it says (ringoram.Driver.Flush).
func (w *treeWorker) state() TreeSnapshot {
	return TreeSnapshot{Tree: w.tree.State(), Reads: w.core.reads, Evictions: w.core.evictions}
}

// restore makes ts the tree's trusted state.
func (w *treeWorker) restore(ts TreeSnapshot) error {
	if err := w.tree.Restore(ts.Tree); err != nil {
		return fmt.Errorf("%w: tree %d: %v", kv.ErrMismatch, w.id, err)
	}
	w.core.reads, w.core.evictions = ts.Reads, ts.Evictions
	return nil
}

// treeCheckpoint is a tree's durable state, its machine's checkpoint:
// whether the tree is written (Initialised), its trusted state once it
// is, the blocks it keeps for the Stash shards (handover), and its record
// of the parts it answered and those released (msgTable; the parts it
// holds unanswered, which a checkpoint does not keep, are left out of it
// too).
type treeCheckpoint struct {
	Initialised bool
	State       TreeSnapshot
	Kept        []handover
	Messages    []imageStream
}

// checkpointState returns the tree's checkpoint, sharing no memory with
// the machine; w.mu is held, no operation is in progress and storage
// holds the tree's Writes (Flush).
func (w *treeWorker) checkpointState(initialised bool) treeCheckpoint {
	cp := treeCheckpoint{Initialised: initialised, Kept: slices.Clone(w.m.kept), Messages: w.m.msgs.answeredImage()}
	if initialised {
		cp.State = w.state()
	}
	return cp
}

// checkpoint returns the tree's checkpoint, encoded (checkpointState).
func (w *treeWorker) checkpoint(initialised bool) []byte {
	return w.checkpointState(initialised).encode()
}

func (cp treeCheckpoint) encode() []byte { return encodeGob(cp) }

// errDuplicatePart answers a Stash shard's second part of one epoch under
// another MsgID (a copy under the same MsgID gets the first one's reply).
var errDuplicatePart = errors.New("treebeard: a Stash shard sent its part of an epoch twice")

// treeWorker is the driver of one tree's machine (oramMachine): it feeds
// the machine every input as an oramEntry, one at a time in the order it
// takes w.mu, and does what the outputs say: it answers the parts, owns
// the epochs' timers, issues the storage Reads and Writes through the
// tree's ringoram.Driver (which seals and opens), journals the records
// and exchanges the eviction's messages with the Stash shards. The
// machine's I/O runs on the worker's goroutine (run), in order; with
// several operations in flight (TestingKnobs.InFlight), each Read and
// each eviction's messages run on a goroutine of their own (aside).
type treeWorker struct {
	id          int
	tree        *ringoram.Driver // the machine's tree, with its storage
	core        *treeCore        // the machine's schedule
	m           *oramMachine
	stashes     []EvictionSource
	trace       func(traceEvent)
	log         *machineLog                 // in this process: the tree's log in the store's journal
	group       *term                       // replicated: the ORAM shard's group this driver leads
	superseded  func(context.Context) error // a later open's takeover, as storage's fence shows it (explain)
	net         *netState
	clock       clockwork.Clock // the epochs' timers run on it
	partTimeout time.Duration   // how long an epoch waits for its last part

	copies   atomic.Uint64 // copies of parts answered from the machine's record
	released releases      // by Stash shard: the eviction messages answered
	admin    sync.Mutex    // held by an AdminMsg's handling
	flushing sync.Mutex    // held while the tree's held Write is issued on its own (flush)

	mu      sync.Mutex
	waiting map[MsgID][]chan partReply  // parts not answered yet: their copies' callers
	timers  map[uint64]clockwork.Timer  // by epoch not all shards sent yet: when to give up on it
	io      []oramOutput                // the machine's I/O to do, in order, for run
	active  int                         // Reads (and eviction messages) under way on their own goroutines
	ended   oramOutput                  // the output that ended the last operation
	applied func(oramEntry, oramOutput) // tests: sees every entry and its outputs, in order
	wake    chan struct{}
	stopped bool
	busy    bool       // doing the machine's I/O
	idle    *sync.Cond // signalled when the worker runs out of I/O
	exited  chan struct{}

	statsMu sync.Mutex
	stats   workerStats
}

type workerStats struct {
	tree           ringoram.Stats
	evictionErrors uint64
	readErrors     uint64
}

func newTreeWorker(id int, core *treeCore, net *netState, clock clockwork.Clock, partTimeout time.Duration, trace func(traceEvent)) *treeWorker {
	w := &treeWorker{id: id, core: core, net: net, clock: clock, partTimeout: partTimeout, trace: trace,
		timers:  map[uint64]clockwork.Timer{},
		waiting: map[MsgID][]chan partReply{}, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	w.idle = sync.NewCond(&w.mu)
	return w
}

// connect makes the machine of the worker's tree, once the tree and the
// Stash shards are known.
func (w *treeWorker) connect(tr *ringoram.Driver, stashes []EvictionSource) {
	w.tree, w.stashes = tr, stashes
	w.m = &oramMachine{id: w.id, stashes: len(stashes), tree: tr.Tree, core: w.core, traced: w.trace != nil,
		incarnation: w.net.incarnation.Load(), msgs: newMsgTable()}
}

// read hands part id to the machine, after the release of the parts
// whose replies its sender has (the Stash shard journaled their epochs),
// and waits for the machine's reply to it: at once for a copy of a part
// answered or released, once the part is read for its first copy and for
// a copy that came meanwhile. A replicated tree takes the release and
// the part in one entry, one commit of the group. An epoch a part of
// which has not come within partTimeout is given up (oramAbandon).
func (w *treeWorker) read(id MsgID, reads []ringoram.PathRead, release []MsgID) partReply {
	done := make(chan partReply, 1)
	es := []oramEntry{{Kind: oramPart, ID: id, Reads: reads}}
	if len(release) > 0 {
		es = slices.Insert(es, 0, oramEntry{Kind: oramRelease, Released: release})
	}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		if w.group != nil { // the term ended: the group's next leader reads it
			return partReply{Status: lostLead(errDeposed)}
		}
		return partReply{Status: statusOf(kv.ErrClosed)}
	}
	w.waiting[id] = append(w.waiting[id], done)
	if w.group == nil {
		for _, e := range es {
			w.applyLocked(e)
		}
	}
	w.mu.Unlock()
	if w.group != nil {
		w.group.propose(treeInputOf(w.id, es...)) // an error: the term ended, and the wait below fails
	}
	select {
	case r := <-done:
		return r
	case <-w.group.deposed():
		return partReply{Status: lostLead(errDeposed)}
	}
}

// apply applies es in order to the machine: under w.mu in this process,
// or as one entry of the shard's group (an error: this driver's term
// ended, and every wait of its fails).
func (w *treeWorker) apply(es ...oramEntry) {
	if w.group != nil {
		w.group.propose(treeInputOf(w.id, es...))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range es {
		w.applyLocked(e)
	}
}

// eachShard calls ask for every Stash shard at once and returns what
// each call returned, in shard order: an eviction's messages to the
// shards go out together, and their outcomes reach the machine in one
// entry.
func eachShard(shards int, ask func(i int) oramEntry) []oramEntry {
	es := make([]oramEntry, shards)
	var wg sync.WaitGroup
	for i := range es {
		wg.Go(func() { es[i] = ask(i) })
	}
	wg.Wait()
	return es
}

// applyLocked applies e to the machine in this process; w.mu is held.
func (w *treeWorker) applyLocked(e oramEntry) { w.afterApply(e, w.m.apply(e)) }

// afterApply does at once what needs no I/O once the machine applied e:
// it hands each reply to the callers waiting for its part, and starts
// and stops the epochs' timers; the I/O is left to run. w.mu is held.
func (w *treeWorker) afterApply(e oramEntry, out oramOutput) {
	if w.applied != nil {
		w.applied(e, out)
	}
	if out.Copy != nil {
		w.copies.Add(1)
	}
	for _, r := range out.Replies {
		for _, ch := range w.waiting[r.ID] {
			ch <- r
		}
		delete(w.waiting, r.ID)
	}
	w.timeParts(out)
	for _, ev := range out.Trace {
		w.trace(ev)
	}
	if out.Ended {
		w.ended = out
		w.noteStats(out)
	}
	if out.hasIO() {
		w.io = append(w.io, out)
		w.wakeUp()
	}
}

// timeParts starts the timers of the epochs that wait for a part, and
// stops those of the epochs all of whose parts came.
func (w *treeWorker) timeParts(out oramOutput) {
	for _, epoch := range out.Wait {
		w.timers[epoch] = w.clock.AfterFunc(w.partTimeout, func() { w.abandon(epoch) })
	}
	for _, epoch := range out.Ready {
		if t := w.timers[epoch]; t != nil {
			t.Stop()
			delete(w.timers, epoch)
		}
	}
}

// abandon feeds the firing of epoch's timer to the machine.
func (w *treeWorker) abandon(epoch uint64) {
	w.mu.Lock()
	delete(w.timers, epoch)
	w.mu.Unlock()
	w.apply(oramEntry{Kind: oramAbandon, Epoch: epoch})
}

// hasIO reports whether out names I/O for the driver.
func (out *oramOutput) hasIO() bool { return out.Evicted != nil || len(out.IO) > 0 }

// run does the machine's I/O until stop, and between operations sends
// the tree's last Write on its own and checkpoints the tree when its log
// is due (betweenOps).
func (w *treeWorker) run() {
	defer close(w.exited)
	for {
		w.mu.Lock()
		io, ok := w.nextIO()
		stopped := w.stopped
		w.busy = ok
		if !w.busy && w.active == 0 {
			w.idle.Broadcast()
		}
		w.mu.Unlock()
		if !ok {
			if stopped && w.waitActive() {
				return
			}
			<-w.wake
			w.nudged()
			continue
		}
		w.do(context.Background(), io)
		w.betweenOps()
	}
}

// nextIO takes the machine's next output to do; w.mu is held.
func (w *treeWorker) nextIO() (oramOutput, bool) {
	if len(w.io) == 0 {
		return oramOutput{}, false
	}
	io := w.io[0]
	w.io = w.io[1:]
	return io, true
}

// waitActive waits until no Read is under way on its own goroutine, and
// reports whether the worker has no I/O left then.
func (w *treeWorker) waitActive() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.active > 0 {
		w.idle.Wait()
	}
	return len(w.io) == 0
}

// quiet reports whether the worker has no I/O to do or under way and no
// operation is in flight; w.mu is held.
func (w *treeWorker) quiet() bool { return len(w.io) == 0 && w.active == 0 && w.m.idle() }

// betweenOps runs after the machine's I/O: when no operation is in
// progress it sends the tree's last Write on its own (one that fails
// goes with the next Read), and if the tree's log is due it takes the
// tree's checkpoint (checkpointIfDue), then lets operations start again;
// while one is in progress and the log is due, it holds off the next
// (oramHold), so that a busy tree reaches a point between operations.
// Only this tree waits for its checkpoint's snapshot; the others go on.
func (w *treeWorker) betweenOps() {
	if w.group != nil { // the group's snapshots are raft's
		w.flushIfIdle()
		return
	}
	w.mu.Lock()
	idle, due := w.quiet(), w.log.Due() && !w.log.busy.Load()
	if !idle && due && !w.m.hold {
		w.applyLocked(oramEntry{Kind: oramHold})
	}
	w.mu.Unlock()
	if !idle || w.flush(context.Background()) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.quiet() {
		w.log.checkpointIfDue(func() checkpointState { return w.checkpointState(true) })
	}
	if w.m.hold {
		w.applyLocked(oramEntry{Kind: oramGo})
	}
}

// flushIfIdle sends the tree's last Write on its own when no operation
// is in progress.
func (w *treeWorker) flushIfIdle() {
	var idle bool
	w.group.view(func() { idle = w.m.idle() })
	w.mu.Lock()
	idle = idle && len(w.io) == 0 && w.active == 0
	w.mu.Unlock()
	if idle {
		w.flush(context.Background())
	}
}

// nudged runs betweenOps when the worker was woken with no I/O to do and
// is not stopping: its log's checkpoint ended with the log due again
// (machineLog.again), and an idle tree takes the next one now.
func (w *treeWorker) nudged() {
	w.mu.Lock()
	idle := len(w.io) == 0 && w.active == 0 && !w.stopped
	w.mu.Unlock()
	if idle {
		w.betweenOps()
	}
}

// wakeUp wakes the worker's goroutine, unless it is woken already.
func (w *treeWorker) wakeUp() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// waitIdle waits until the worker has no I/O queued or in progress.
func (w *treeWorker) waitIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.busy || len(w.io) > 0 || w.active > 0 {
		w.idle.Wait()
	}
}

// do issues the I/O of out and feeds its outcomes to the machine: the
// end of an eviction's record, then each operation's step (its blocks
// from the Stash shards, its journaled plan and a Read, its journaled
// Change and Write, or its placements reported to the Stash shards).
func (w *treeWorker) do(ctx context.Context, out oramOutput) {
	if out.Evicted != nil && w.group == nil {
		w.log.Append(out.Evicted)
	}
	for _, io := range out.IO {
		w.doIO(ctx, io)
	}
}

// doIO issues one operation's I/O. With several operations in flight, a
// Read and the eviction's messages run on their own goroutines, so that
// another operation's I/O need not wait for them; the plan a Read
// follows is appended to the journal first, in the machine's order.
func (w *treeWorker) doIO(ctx context.Context, io oramIO) {
	switch {
	case io.Ask:
		w.aside(func() {
			w.apply(eachShard(len(w.stashes), func(i int) oramEntry {
				rep := w.evictionBlocks(i, io.Number)
				return oramEntry{Kind: oramBlocks, Number: io.Number, Shard: i, Blocks: rep.Blocks, Failure: rep.Status}
			})...)
		})
	case io.Metas != nil || io.Slots != nil:
		durable := w.appendRecord(io.Record)
		w.aside(func() { w.apply(w.readFor(ctx, io, durable)) })
	case io.Write != nil:
		w.apply(oramEntry{Kind: oramJournaled, Failure: w.writeAhead(io.Record, io.Write)})
	case io.Placed != nil:
		w.aside(func() {
			w.apply(eachShard(len(w.stashes), func(i int) oramEntry {
				rep := w.evictionDone(i, io.Number, io.Handed[i], io.Placed[i])
				return oramEntry{Kind: oramEvicted, Number: io.Number, Shard: i, Stale: rep.Stale, Failure: rep.Status}
			})...)
		})
	}
}

// aside runs fn on its own goroutine when several operations may be in
// flight, else now.
func (w *treeWorker) aside(fn func()) {
	if w.m.inFlight <= 1 {
		fn()
		return
	}
	w.mu.Lock()
	w.active++
	w.mu.Unlock()
	go func() {
		defer func() {
			w.mu.Lock()
			w.active--
			w.idle.Broadcast()
			w.mu.Unlock()
			w.wakeUp()
		}()
		fn()
	}()
}

// appendRecord appends record, if the tree journals it, and returns
// what makes it durable: nil when there is nothing to wait for.
func (w *treeWorker) appendRecord(record []byte) (durable func() error) {
	if !w.journals(record) {
		return nil
	}
	lsn := w.log.Append(record)
	return func() error { return w.log.Sync(lsn) }
}

// readFor makes io's plan durable (Treebeard Sec. 5.3.3: before its
// Read), issues its Read and returns the entry that brings its answer to
// the machine.
func (w *treeWorker) readFor(ctx context.Context, io oramIO, durable func() error) oramEntry {
	kind := oramSlots
	if io.Metas != nil {
		kind = oramMetas
	}
	e := oramEntry{Kind: kind, Number: io.Op}
	if durable != nil {
		if err := durable(); err != nil {
			e.Failure = statusOf(fmt.Errorf("treebeard: journal: %w", err))
			return e
		}
	}
	var err error
	switch {
	case io.Metas != nil && io.Carry:
		e.Plains, err = w.tree.ReadMetas(ctx, io.Metas)
	case io.Metas != nil:
		e.Plains, err = w.tree.ReadMetasBeside(ctx, io.Metas)
	case io.Carry:
		e.Reals, err = w.tree.ReadSlots(ctx, io.Slots)
	default:
		e.Reals, err = w.tree.ReadSlotsBeside(ctx, io.Slots)
	}
	e.Failure = statusOf(w.explain(ctx, err))
	return e
}

// flush issues the tree's held Write on its own, as between operations,
// for an AdminState and for a checkpoint of every machine, which may run
// at the same moment.
func (w *treeWorker) flush(ctx context.Context) error {
	w.flushing.Lock()
	defer w.flushing.Unlock()
	return w.tree.Flush(ctx)
}

// explain returns err, unless it is tampering and storage holds a later
// open's fence for the tree: that open's writes are what failed
// authentication here, and the store was deposed (kv.ErrFenced), not
// tampered with.
func (w *treeWorker) explain(ctx context.Context, err error) error {
	if !errors.Is(err, kv.ErrTampered) || w.superseded == nil {
		return err
	}
	if fenced := w.superseded(ctx); fenced != nil {
		return fmt.Errorf("treebeard: tree %d: a later open of the store has taken over (%w); what failed authentication was its writes: %v", w.id, fenced, err)
	}
	return err
}

// writeAhead seals an operation's Write, journals its record (its
// Change, not the Write: recovery finds out whether the Write landed and
// runs the operation again if not), and holds the Write for the tree's
// next Read. The record needs no fsync of its own: the Write waits until
// it is durable (ringoram.Driver.HoldUntil), which the next operation's
// plan, synced before its Reads, makes it; and whatever the operation
// leads to that a client sees is acknowledged only after a Stash shard's
// record appended later is synced, in the one journal's order.
func (w *treeWorker) writeAhead(record []byte, ws []ringoram.BucketWrite) Status {
	items, err := w.tree.Seal(ws)
	if err != nil {
		return statusOf(err)
	}
	w.tree.HoldUntil(items, w.appendRecord(record))
	return Status{}
}

// journals reports whether record goes to the tree's journal: there is
// one, and the tree is not replicated (a replicated tree's record is the
// group's commit of the entry that made it).
func (w *treeWorker) journals(record []byte) bool { return record != nil && w.group == nil }

// runNow applies e and does the I/O of the operation it starts on the
// caller's goroutine, until the operation ends: recovery's, before the
// worker runs. It returns the output that ended it.
func (w *treeWorker) runNow(ctx context.Context, e oramEntry) oramOutput {
	w.apply(e)
	for {
		w.mu.Lock()
		io, ok := w.nextIO()
		w.mu.Unlock()
		if ok {
			w.do(ctx, io)
		} else if w.waitActive() {
			break
		}
	}
	return w.ended
}

// landed reports whether the Write of c, the tree's last operation
// journaled before a crash, reached storage: by the metadata versions
// storage holds for its buckets (ringoram.Driver.Landed).
func (w *treeWorker) landed(ctx context.Context, c ringoram.Change) (bool, error) {
	return w.tree.Landed(ctx, c)
}

// resume issues again, identically, the operation of the tree that a
// crash cut short after its plan was journaled (Treebeard Sec. 5.3.3:
// storage may have seen its Reads, so they must not be chosen afresh). A
// multi-path read runs again and the tree keeps its blocks for their
// shards (handover), as if its requests had been cut short after it; an eviction
// runs again with its own number of paths. It fails if the operation
// fails: recovery then stops, and the journal keeps the plan for the
// next attempt.
func (w *treeWorker) resume(ctx context.Context, p ringoram.Plan) error {
	end := w.runNow(ctx, oramEntry{Kind: oramResume, Plan: p})
	if err := errors.Join(end.ReadFail.Err(), end.EvictFail.Err()); err != nil {
		return err
	}
	// A plan journaled before reads and evictions shared a round trip
	// evicts nothing: what the read owes is evicted now.
	if end.Owed > 0 {
		return w.evict(ctx, end.Owed)
	}
	return nil
}

// evict evicts k paths owed, on the caller's goroutine (runNow), and
// returns the eviction's failures (the blocks of a failed eviction stay
// stashed).
func (w *treeWorker) evict(ctx context.Context, k int) error {
	return w.runNow(ctx, oramEntry{Kind: oramEvict, Paths: k}).EvictFail.Err()
}

func (w *treeWorker) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.wakeUp()
	<-w.exited
}

// evictionBlocks asks Stash shard i for the blocks of eviction number,
// again while the message is lost in transit.
func (w *treeWorker) evictionBlocks(i int, number uint64) EvictionBlocksReply {
	id := w.evictionMsgID(number, 0)
	return exchange(w.net, &w.released, i, id, func(release []MsgID) EvictionBlocksReply {
		return w.stashes[i].EvictionBlocks(EvictionBlocksMsg{ID: id, Release: release})
	})
}

// evictionDone reports eviction number's placements to Stash shard i.
func (w *treeWorker) evictionDone(i int, number uint64, blocks []ringoram.Block, placed []int64) EvictionDoneReply {
	id := w.evictionMsgID(number, 1)
	return exchange(w.net, &w.released, i, id, func(release []MsgID) EvictionDoneReply {
		return w.stashes[i].EvictionDone(EvictionDoneMsg{ID: id, Blocks: blocks, Placed: placed, Release: release})
	})
}

// evictionMsgID names the tree's step-th message to a Stash shard in its
// eviction number (0: the hand-off, 1: the placements).
func (w *treeWorker) evictionMsgID(number, step uint64) MsgID {
	return w.net.msgID(Endpoint{LayerORAM, w.id}, number, step)
}

// noteStats counts an operation's failures; w.mu is held.
func (w *treeWorker) noteStats(out oramOutput) {
	st := w.tree.Stats()
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	w.stats.tree = st
	if out.ReadFail.Code != CodeOK {
		w.stats.readErrors++
	}
	if out.EvictFail.Code != CodeOK {
		w.stats.evictionErrors++
	}
}

// heldReplies is the number of replies to parts kept for their senders.
func (w *treeWorker) heldReplies() int {
	var n int
	if w.group != nil {
		w.group.view(func() { n = w.m.msgs.heldCount() })
		return n
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m.msgs.heldCount()
}

func (w *treeWorker) snapshot() workerStats {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	return w.stats
}
