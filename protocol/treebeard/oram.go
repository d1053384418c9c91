package treebeard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/oblivkv/oblivkv/backend"
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

// ReadPaths queues Stash shard shard's reads of epoch for tree t and
// waits for their results.
func (o *ORAM) ReadPaths(ctx context.Context, t int, epoch uint64, shard int, reads []ringoram.PathRead) ([]ringoram.ReadResult, Status) {
	w, ok := o.workers[t]
	if !ok {
		return nil, statusOf(fmt.Errorf("treebeard: this ORAM shard does not own tree %d", t))
	}
	results, err := w.read(ctx, epoch, shard, reads)
	return results, statusOf(err)
}

// errDuplicatePart answers a Stash shard's second part of one epoch.
var errDuplicatePart = errors.New("treebeard: a Stash shard sent its part of an epoch twice")

// treeWorker runs one tree's operations in order: it drives the tree's
// treeCore (which epochs to read, when to evict) and its ringoram.Tree
// (the buckets and their I/O).
type treeWorker struct {
	id      int
	tree    *ringoram.Tree
	core    *treeCore
	stashes []EvictionSource
	trace   func(traceEvent)
	log     *durable.Log

	mu      sync.Mutex
	waiting map[partKey]*readJob // parts of epochs not all shards sent yet
	queue   []*readJob           // parts of whole epochs, in the order they completed
	wake    chan struct{}
	stopped bool
	busy    bool       // serving jobs (a read and its evictions)
	idle    *sync.Cond // signalled when the worker runs out of jobs
	exited  chan struct{}

	// Owned by the worker goroutine.
	opReads int // path reads the operation in progress counts

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

func newTreeWorker(id int, core *treeCore, trace func(traceEvent)) *treeWorker {
	w := &treeWorker{id: id, core: core, trace: trace,
		waiting: map[partKey]*readJob{}, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	w.idle = sync.NewCond(&w.mu)
	return w
}

func (w *treeWorker) read(ctx context.Context, epoch uint64, shard int, reads []ringoram.PathRead) ([]ringoram.ReadResult, error) {
	j := &readJob{epoch: epoch, reads: reads, done: make(chan struct{})}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil, kv.ErrClosed
	}
	ready, dup := w.core.part(epoch, shard)
	if dup {
		w.mu.Unlock()
		return nil, errDuplicatePart
	}
	w.waiting[partKey{epoch, shard}] = j
	for _, s := range ready {
		k := partKey{epoch, s}
		w.queue = append(w.queue, w.waiting[k])
		delete(w.waiting, k)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	select {
	case <-j.done:
		return j.results, j.err
	case <-ctx.Done():
		return nil, ctx.Err()
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

// writeAhead journals an operation of the tree, its Change and the items
// of its Write, before the Write is issued (ringoram.Config.WriteAhead).
func (w *treeWorker) writeAhead(_ context.Context, c ringoram.Change, items []backend.Item) error {
	if _, err := w.log.Commit(treeDelta(w.id, w.core.reads+w.opReads, c), durable.Op{Items: items}); err != nil {
		return fmt.Errorf("treebeard: journal: %w", err)
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

// serve runs one multi-path read for jobs, answers them, then evicts k
// paths for every A path reads owed (Sec. 5.3.2; several owed evictions
// run as one eviction of their paths together).
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
	w.opReads = w.core.counted(reads)
	results, err := w.tree.ReadPaths(ctx, reads)
	w.opReads = 0
	if w.trace != nil && err == nil {
		w.traceRead(jobs)
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
	if err != nil {
		return
	}
	if paths := w.core.served(w.core.counted(reads)); paths > 0 {
		w.evict(ctx, paths)
	}
}

// traceRead reports a multi-path read of jobs: each path and its epoch.
func (w *treeWorker) traceRead(jobs []*readJob) {
	ev := traceEvent{Kind: traceRead, Tree: w.id}
	for _, j := range jobs {
		for _, r := range j.reads {
			ev.Leaves, ev.Epochs = append(ev.Leaves, r.Leaf), append(ev.Epochs, j.epoch)
		}
	}
	w.trace(ev)
}

// evict collects the tree's blocks from every Stash shard, evicts k paths
// and reports the placements back; stale copies are forgotten by the tree.
func (w *treeWorker) evict(ctx context.Context, k int) {
	var blocks []ringoram.Block
	from := make([]int, len(w.stashes)+1) // blocks[from[i]:from[i+1]] came from stash i
	var errs []error
	for i, s := range w.stashes {
		bs, st := s.EvictionBlocks(ctx, w.id)
		errs = append(errs, st.Err())
		blocks = append(blocks, bs...)
		from[i+1] = len(blocks)
	}
	var leaves []uint64
	if w.trace != nil {
		leaves = w.tree.EvictionLeaves(k)
	}
	placed, err := w.tree.Evict(ctx, k, blocks)
	if err != nil { // nothing was placed: every block stays stashed
		placed = make([]int64, len(blocks))
		for i := range placed {
			placed[i] = -1
		}
	} else if w.trace != nil {
		w.trace(traceEvent{Kind: traceEvict, Tree: w.id, Leaves: leaves})
	}
	errs = append(errs, err)
	var stale []Stale
	for i, s := range w.stashes {
		st, status := s.EvictionDone(ctx, w.id, blocks[from[i]:from[i+1]], placed[from[i]:from[i+1]])
		errs = append(errs, status.Err())
		stale = append(stale, st...)
	}
	for _, st := range stale {
		w.tree.Forget(st.Bucket, st.ID)
	}
	w.log.Append(evictDoneDelta(w.id, removed(blocks, placed, stale), stale))
	w.noteStats(false, errors.Join(errs...) != nil)
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
