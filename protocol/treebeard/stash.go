package treebeard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// Stash is one Stash shard (Treebeard Sec. 5.2): the driver of a
// stashCore, which holds the position map and the stash of the blocks
// hashed to the shard and the per-block request queues that make every
// key linearizable (Sec. 5.2.3: requests to a block are applied in the
// order the shard receives them). Stash owns the I/O: it sends each
// epoch's path reads to the trees' owners, feeds their results back to the
// core, journals each epoch and hands each reply back once it is ready.
type Stash struct {
	id    int          // the shard's number, which the trees' epoch barriers count by
	trees []PathReader // by tree: the ORAM shard that owns it
	log   *durable.Log

	mu     sync.Mutex
	core   *stashCore
	epochs map[uint64]*pendingEpoch // epochs whose replies are not all ready
}

// pendingEpoch collects the replies of an epoch as the core makes them.
type pendingEpoch struct {
	replies []Reply
	left    int
	done    chan struct{} // closed when left reaches zero
}

func newStash(id int, core *stashCore, log *durable.Log) *Stash {
	return &Stash{id: id, core: core, log: log, epochs: map[uint64]*pendingEpoch{}}
}

// connect gives the shard the owner of each tree.
func (s *Stash) connect(trees []PathReader) { s.trees = trees }

// Access runs a batch (Sec. 5.2.1): the core plans one path read per
// request, the reads go to every tree, and each reply waits for its own
// batch's reads, for the real read its block is queued behind, and for
// the epoch's journal record.
func (s *Stash) Access(ctx context.Context, epoch uint64, batch []Request) []Reply {
	pe := &pendingEpoch{replies: make([]Reply, len(batch)), left: len(batch), done: make(chan struct{})}
	s.mu.Lock()
	if len(batch) > 0 {
		s.epochs[epoch] = pe
	}
	plan := s.core.plan(epoch, batch)
	s.deliverLocked(plan.Done)
	s.mu.Unlock()
	failure := s.readAll(context.WithoutCancel(ctx), epoch, plan.Reads)
	if len(batch) > 0 {
		<-pe.done
	}
	if err := s.journal(batch); err != nil {
		failure = cmp.Or(failure, err)
	}
	// A request whose own (fake) read failed learns it, even if it was
	// answered from the stash: its outcome is unknown to its client. Fake
	// reads are tied to no request, so a failure fails the whole batch.
	if failure != nil {
		for i := range pe.replies {
			if pe.replies[i].Code == CodeOK {
				pe.replies[i] = failed(failure)
			}
		}
	}
	return pe.replies
}

// deliverLocked hands ready replies to their epochs; s.mu is held.
func (s *Stash) deliverLocked(done []completion) {
	for _, c := range done {
		pe := s.epochs[c.To.Epoch]
		pe.replies[c.To.Index] = c.Reply
		if pe.left--; pe.left == 0 {
			delete(s.epochs, c.To.Epoch)
			close(pe.done)
		}
	}
}

// readAll sends every tree this batch's reads of it, none for most trees
// of a small batch: a tree reads an epoch once every shard has sent its
// part, so which shards hold the epoch's keys never shows. It returns the
// failure of any tree's read.
func (s *Stash) readAll(ctx context.Context, epoch uint64, reads [][]ringoram.PathRead) error {
	errs := make([]error, len(s.trees))
	var wg sync.WaitGroup
	for t, rs := range reads {
		wg.Go(func() {
			results, st := s.trees[t].ReadPaths(ctx, t, epoch, s.id, rs)
			s.mu.Lock()
			done, err := s.core.returned(t, rs, results, st.Err())
			s.deliverLocked(done)
			s.mu.Unlock()
			errs[t] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("treebeard: a path read of this epoch failed: %w", err)
	}
	return nil
}

// journal appends the epoch's record and waits until it is durable: the
// replies leave only then (the records of concurrent epochs share an
// fsync).
func (s *Stash) journal(batch []Request) error {
	s.mu.Lock()
	lsn := s.log.Append(s.core.endEpoch(batch))
	s.mu.Unlock()
	if err := s.log.Sync(lsn); err != nil {
		return fmt.Errorf("treebeard: journal: %w", err)
	}
	return nil
}

// EvictionBlocks hands tree t's blocks to its eviction (stashCore.evictionBlocks).
func (s *Stash) EvictionBlocks(_ context.Context, t int) ([]ringoram.Block, Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.evictionBlocks(t), Status{}
}

// EvictionDone ends tree t's eviction (stashCore.evictionDone).
func (s *Stash) EvictionDone(_ context.Context, t int, blocks []ringoram.Block, placed []int64) ([]Stale, Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.evictionDone(t, blocks, placed), Status{}
}

// locked runs fn on the core with s.mu held (loads, checkpoints, recovery
// and stats).
func (s *Stash) locked(fn func(c *stashCore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.core)
}
