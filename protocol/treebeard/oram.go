package treebeard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// ORAM is one ORAM shard (Sec. 5.3): the only reader and writer of the
// trees it owns. Each tree has one worker that runs the tree's operations
// one at a time: multi-path reads of the path reads queued for it, and
// after every A path reads of the tree an eviction of the next k paths in
// reverse-lexicographic order (Sec. 5.3.2), fed with the tree's blocks
// from every Stash shard.
type ORAM struct {
	workers map[int]*treeWorker
}

// ReadPaths queues a Stash shard's part of an epoch for the tree it names
// and waits for its results. A copy of a part gets the first copy's
// results: the part is read once.
func (o *ORAM) ReadPaths(m ReadPathsMsg) ReadPathsReply {
	w, st := o.worker(m.Tree)
	if st.Code != CodeOK {
		return ReadPathsReply{Status: st}
	}
	w.parts.release(m.Release)
	return w.parts.do(m.ID, func() ReadPathsReply {
		results, err := w.read(m.ID.Epoch, m.ID.Sender.Index, m.Reads)
		return ReadPathsReply{Results: results, Status: statusOf(err)}
	})
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
// idle for the first three. Copies of a message run one after the other.
func (o *ORAM) Admin(m AdminMsg) AdminReply {
	w, st := o.worker(m.Tree)
	if st.Code != CodeOK {
		return AdminReply{Status: st}
	}
	w.admin.Lock()
	defer w.admin.Unlock()
	switch m.Op {
	case AdminState: // storage must hold what the state says it does
		if err := w.tree.Flush(context.Background()); err != nil {
			return AdminReply{Status: statusOf(err)}
		}
		return AdminReply{State: TreeSnapshot{Tree: w.tree.State(), Reads: w.core.reads, Evictions: w.core.evictions}}
	case AdminInit:
		return AdminReply{Status: statusOf(w.tree.Init(context.Background(), m.Placed))}
	case AdminRestore:
		if err := w.tree.Restore(m.State.Tree); err != nil {
			return AdminReply{Status: statusOf(fmt.Errorf("%w: tree %d: %v", kv.ErrMismatch, m.Tree, err))}
		}
		w.core.reads, w.core.evictions = m.State.Reads, m.State.Evictions
		return AdminReply{}
	case AdminStats:
		ws := w.snapshot()
		return AdminReply{Stats: LayerStats{Tree: ws.tree, ReadErrors: ws.readErrors, EvictionErrors: ws.evictionErrors,
			Copies: w.parts.copies.Load(), Held: w.parts.held()}}
	}
	return unknownAdmin(LayerORAM, m.Op)
}

// errDuplicatePart answers a Stash shard's second part of one epoch under
// another MsgID (a copy under the same MsgID gets the first one's reply).
var errDuplicatePart = errors.New("treebeard: a Stash shard sent its part of an epoch twice")

// treeWorker runs one tree's operations in order: it drives the tree's
// treeCore (which epochs to read, when to evict) and its ringoram.Tree
// (the buckets and their I/O).
type treeWorker struct {
	id          int
	tree        *ringoram.Driver
	core        *treeCore
	stashes     []EvictionSource
	trace       func(traceEvent)
	log         *durable.Log
	net         *netState
	clock       clockwork.Clock // the part timeouts run on it
	partTimeout time.Duration   // how long an epoch waits for its last part

	parts    *answered[ReadPathsReply, *ReadPathsReply]
	released releases   // by Stash shard: the eviction messages answered
	admin    sync.Mutex // held by an AdminMsg's handling

	mu      sync.Mutex
	waiting map[partKey]*readJob       // parts of epochs not all shards sent yet
	timers  map[uint64]clockwork.Timer // by epoch not all shards sent yet: when to give up on it
	queue   []*readJob                 // parts of whole epochs, in the order they completed
	wake    chan struct{}
	stopped bool
	busy    bool       // serving jobs (a read and its evictions)
	idle    *sync.Cond // signalled when the worker runs out of jobs
	exited  chan struct{}

	// Owned by the worker goroutine.
	opLeft int // path reads since the last eviction once the operation in progress is done: its record's count

	statsMu sync.Mutex
	stats   workerStats
}

type workerStats struct {
	tree           ringoram.Stats
	evictionErrors uint64
	readErrors     uint64
}

type partKey struct {
	epoch uint64
	shard int
}

type readJob struct {
	epoch   uint64
	reads   []ringoram.PathRead
	results []ringoram.ReadResult
	err     error
	done    chan struct{}
}

func newTreeWorker(id int, core *treeCore, net *netState, clock clockwork.Clock, partTimeout time.Duration, trace func(traceEvent)) *treeWorker {
	w := &treeWorker{id: id, core: core, net: net, clock: clock, partTimeout: partTimeout, trace: trace,
		parts: newAnswered[ReadPathsReply](), timers: map[uint64]clockwork.Timer{},
		waiting: map[partKey]*readJob{}, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	w.idle = sync.NewCond(&w.mu)
	return w
}

// read holds shard's part of epoch until every shard has sent its part,
// then queues the whole epoch and waits for its results. An epoch a part
// of which has not come within partTimeout is given up (abandon).
func (w *treeWorker) read(epoch uint64, shard int, reads []ringoram.PathRead) ([]ringoram.ReadResult, error) {
	j := &readJob{epoch: epoch, reads: reads, done: make(chan struct{})}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil, kv.ErrClosed
	}
	ready, outcome := w.core.part(epoch, shard)
	switch outcome {
	case partDuplicate:
		w.mu.Unlock()
		return nil, errDuplicatePart
	case partLate:
		w.mu.Unlock()
		return nil, fmt.Errorf("treebeard: tree %d gave up epoch %d before Stash shard %d's part came", w.id, epoch, shard)
	case partHeld:
		w.waiting[partKey{epoch, shard}] = j
		if w.timers[epoch] == nil {
			w.timers[epoch] = w.clock.AfterFunc(w.partTimeout, func() { w.abandon(epoch) })
		}
	case partComplete:
		w.waiting[partKey{epoch, shard}] = j
		if t := w.timers[epoch]; t != nil {
			t.Stop()
			delete(w.timers, epoch)
		}
		for _, s := range ready {
			k := partKey{epoch, s}
			w.queue = append(w.queue, w.waiting[k])
			delete(w.waiting, k)
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-j.done
	return j.results, j.err
}

// abandon gives up epoch, if some shard's part of it is still missing:
// the parts that came fail with CodeUnavailable, nothing of the epoch is
// read, and a part that comes later is refused (treeCore.abandon).
func (w *treeWorker) abandon(epoch uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.timers, epoch)
	held, missing := w.core.abandon(epoch)
	for _, s := range held {
		k := partKey{epoch, s}
		j := w.waiting[k]
		delete(w.waiting, k)
		j.err = fmt.Errorf("treebeard: tree %d gave up epoch %d: no part from Stash shard(s) %v within %v", w.id, epoch, missing, w.partTimeout)
		close(j.done)
	}
}

// run serves the queue until stop: the whole epochs waiting are merged
// into one multi-path read, so paths of concurrent epochs share buckets
// too.
func (w *treeWorker) run() {
	defer close(w.exited)
	for {
		w.mu.Lock()
		jobs := w.queue
		w.queue = nil
		stopped := w.stopped
		w.busy = len(jobs) > 0
		if !w.busy {
			w.idle.Broadcast()
		}
		w.mu.Unlock()
		if len(jobs) == 0 {
			if stopped {
				return
			}
			<-w.wake
			continue
		}
		w.serve(jobs)
		w.flushIfIdle()
	}
}

// flushIfIdle sends the tree's last Write on its own when no read is
// queued to carry it to storage (ringoram.Tree.Flush), still busy so that
// a checkpoint waits for it. One that fails goes with the next read.
func (w *treeWorker) flushIfIdle() {
	w.mu.Lock()
	idle := len(w.queue) == 0
	w.mu.Unlock()
	if idle {
		w.tree.Flush(context.Background())
	}
}

// waitIdle waits until the worker has no job queued or in progress.
func (w *treeWorker) waitIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.busy || len(w.queue) > 0 {
		w.idle.Wait()
	}
}

// writeAhead journals an operation of the tree, its Change, before its
// Write is issued (ringoram.Config.WriteAhead). The Write is not
// journaled: recovery finds out whether it landed (landed) and runs the
// operation again if not.
func (w *treeWorker) writeAhead(_ context.Context, c ringoram.Change) error {
	if _, err := w.log.Commit(opDelta(w.id, w.opLeft, c)); err != nil {
		return fmt.Errorf("treebeard: journal: %w", err)
	}
	return nil
}

// landed reports whether the Write of c, the tree's last operation
// journaled before a crash, reached storage: by the metadata versions
// storage holds for its buckets (ringoram.Tree.Landed).
func (w *treeWorker) landed(ctx context.Context, c ringoram.Change) (bool, error) {
	return w.tree.Landed(ctx, c)
}

// readAhead journals an operation's Plan before it reads a slot
// (ringoram.Config.ReadAhead), so that recovery can resume it.
func (w *treeWorker) readAhead(_ context.Context, p ringoram.Plan) error {
	if _, err := w.log.Commit(planDelta(w.id, p)); err != nil {
		return fmt.Errorf("treebeard: journal: %w", err)
	}
	return nil
}

// resume issues again, identically, the operation of the tree that a
// crash cut short after its plan was journaled (Treebeard Sec. 5.3.3:
// storage may have seen its Reads, so they must not be chosen afresh). A
// multi-path read runs again and its blocks go to their shards' stashes
// (stash), as if its requests had been cut short after it; an eviction
// runs again with its own number of paths. It fails if the operation
// fails: recovery then stops, and the journal keeps the plan for the
// next attempt.
func (w *treeWorker) resume(ctx context.Context, p ringoram.Plan, stash func([]tree.Block)) error {
	w.tree.Resume(p)
	if len(p.Reads) == 0 {
		return w.evict(ctx, p.Evict)
	}
	counted := w.core.counted(p.Reads)
	results, placed, ev, err := w.readEvict(ctx, p.Reads, counted, p.Evict)
	w.noteStats(err != nil, false)
	if p.Evict > 0 {
		err = errors.Join(err, w.endEviction(ev, placed, err))
	}
	if err != nil {
		return err
	}
	var taken []tree.Block
	for i, r := range p.Reads {
		if r.Real && results[i].Found {
			taken = append(taken, results[i].Block)
		}
	}
	stash(taken)
	// A plan journaled before reads and evictions shared a round trip
	// evicts nothing: what the read owes is evicted now.
	if paths := w.core.served(counted) - p.Evict; paths > 0 {
		return w.evict(ctx, paths)
	}
	return nil
}

func (w *treeWorker) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.exited
}

// serve runs one multi-path read for jobs and, when the reads it counts
// bring k paths per A path reads owed (Sec. 5.3.2; several owed evictions
// run as one eviction of their paths together), the eviction of those
// paths in the same round trip (ringoram.Tree.ReadEvict), then answers
// the jobs and ends the eviction.
func (w *treeWorker) serve(jobs []*readJob) {
	ctx := context.Background()
	var reads []ringoram.PathRead
	for _, j := range jobs {
		reads = append(reads, j.reads...)
	}
	if len(reads) == 0 { // epochs without paths of this tree: nothing to read
		for _, j := range jobs {
			close(j.done)
		}
		return
	}
	counted := w.core.counted(reads)
	paths, _ := w.core.owes(counted)
	results, placed, ev, err := w.readEvict(ctx, reads, counted, paths)
	if err == nil {
		w.core.served(counted)
		if w.trace != nil {
			w.traceRead(jobs)
		}
	}
	off := 0
	for _, j := range jobs {
		if err == nil {
			j.results = results[off : off+len(j.reads)]
		}
		j.err = err
		off += len(j.reads)
		close(j.done)
	}
	w.noteStats(err != nil, false)
	if paths > 0 {
		w.endEviction(ev, placed, err)
	}
}

// readEvict runs a multi-path read of reads, counting counted path reads,
// and the eviction of paths with it in the same round trip
// (ringoram.Tree.ReadEvict); the operation's record counts the path reads
// it leaves since the last eviction.
func (w *treeWorker) readEvict(ctx context.Context, reads []ringoram.PathRead, counted, paths int) ([]ringoram.ReadResult, []int64, *eviction, error) {
	_, w.opLeft = w.core.owes(counted)
	ev := w.handOff(paths)
	results, placed, err := w.tree.ReadEvict(ctx, reads, paths, ev.blocks)
	return results, placed, ev, err
}

// traceRead reports a multi-path read of jobs: each path, its epoch and
// the block it fetches.
func (w *treeWorker) traceRead(jobs []*readJob) {
	ev := traceEvent{Kind: traceRead, Tree: w.id}
	for _, j := range jobs {
		for _, r := range j.reads {
			ev.Leaves, ev.Epochs, ev.Wants = append(ev.Leaves, r.Leaf), append(ev.Epochs, j.epoch), append(ev.Wants, r.Want)
		}
	}
	w.trace(ev)
}

// eviction is an eviction of k paths under way: the blocks every Stash
// shard handed the tree for it (Sec. 5.2.2).
type eviction struct {
	number uint64
	leaves []uint64 // for the trace
	blocks []ringoram.Block
	from   []int // blocks[from[i]:from[i+1]] came from Stash shard i
	errs   []error
}

// handOff starts an eviction of k paths (none when k is 0): it collects
// the tree's blocks from every Stash shard.
func (w *treeWorker) handOff(k int) *eviction {
	ev := &eviction{from: make([]int, len(w.stashes)+1)}
	if k == 0 {
		return ev
	}
	ev.number = w.core.nextEviction()
	for i := range w.stashes {
		rep := w.evictionBlocks(i, ev.number)
		ev.errs = append(ev.errs, rep.Err())
		ev.blocks = append(ev.blocks, rep.Blocks...)
		ev.from[i+1] = len(ev.blocks)
	}
	if w.trace != nil {
		ev.leaves = w.tree.EvictionLeaves(k)
	}
	return ev
}

// evict collects the tree's blocks from every Stash shard, evicts k paths
// and reports the placements back (endEviction). It returns the
// eviction's failures (the blocks of a failed eviction stay stashed).
func (w *treeWorker) evict(ctx context.Context, k int) error {
	w.opLeft = w.core.reads // what is owed was counted already
	ev := w.handOff(k)
	placed, err := w.tree.Evict(ctx, k, ev.blocks)
	return w.endEviction(ev, placed, err)
}

// endEviction reports an eviction's placements (placed, or none when it
// failed with err) to every Stash shard; the copies they report stale are
// forgotten by the tree. It returns the eviction's failures.
func (w *treeWorker) endEviction(ev *eviction, placed []int64, err error) error {
	if err != nil { // nothing was placed: every block stays stashed
		placed = make([]int64, len(ev.blocks))
		for i := range placed {
			placed[i] = -1
		}
	} else if w.trace != nil {
		w.trace(traceEvent{Kind: traceEvict, Tree: w.id, Leaves: ev.leaves})
	}
	errs := append(ev.errs, err)
	var stale []Stale
	for i := range w.stashes {
		rep := w.evictionDone(i, ev.number, ev.blocks[ev.from[i]:ev.from[i+1]], placed[ev.from[i]:ev.from[i+1]])
		errs = append(errs, rep.Err())
		stale = append(stale, rep.Stale...)
	}
	for _, st := range stale {
		w.tree.Forget(st.Bucket, st.ID)
	}
	w.log.Append(evictDoneDelta(w.id, removed(ev.blocks, placed, stale), stale))
	failed := errors.Join(errs...)
	w.noteStats(false, failed != nil)
	return failed
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

// removed returns the blocks an eviction placed that left the stash: all
// placed but those whose copies are stale.
func removed(blocks []ringoram.Block, placed []int64, stale []Stale) []tree.BlockID {
	var out []tree.BlockID
	for i, b := range blocks {
		if placed[i] >= 0 && !slices.ContainsFunc(stale, func(st Stale) bool { return st.ID == b.Block.ID }) {
			out = append(out, b.Block.ID)
		}
	}
	return out
}

func (w *treeWorker) noteStats(readErr, evictErr bool) {
	st := w.tree.Stats()
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	w.stats.tree = st
	if readErr {
		w.stats.readErrors++
	}
	if evictErr {
		w.stats.evictionErrors++
	}
}

func (w *treeWorker) snapshot() workerStats {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	return w.stats
}
