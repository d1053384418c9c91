package treebeard

import (
	"cmp"
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
	net   *netState
	quota *quota // the store's: each epoch takes the room it may need from it

	accesses    *answered[AccessReply, *AccessReply]
	evictBlocks *answered[EvictionBlocksReply, *EvictionBlocksReply]
	evictDone   *answered[EvictionDoneReply, *EvictionDoneReply]
	released    releases // by tree

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

func newStash(id int, core *stashCore, q *quota, log *durable.Log, net *netState) *Stash {
	return &Stash{id: id, core: core, quota: q, log: log, net: net, epochs: map[uint64]*pendingEpoch{},
		accesses: newAnswered[AccessReply](), evictBlocks: newAnswered[EvictionBlocksReply](),
		evictDone: newAnswered[EvictionDoneReply]()}
}

// connect gives the shard the owner of each tree.
func (s *Stash) connect(trees []PathReader) { s.trees = trees }

// Access runs a Router's batch once, however many copies of its message
// arrive (answered), and each of its requests once, however many batches
// bring it (requestTable).
func (s *Stash) Access(m AccessMsg) AccessReply {
	s.accesses.release(m.Release)
	s.releaseRequests(m.Release)
	return s.accesses.do(m.ID, func() AccessReply {
		return AccessReply{Replies: s.access(m.ID.Epoch, m.Batch)}
	})
}

// access runs a batch (Sec. 5.2.1): the core plans one path read per
// request, the reads go to every tree, and each reply waits for its own
// batch's reads, for the real read its block is queued behind, and for
// the epoch's journal record.
func (s *Stash) access(epoch uint64, batch []Request) []Reply {
	pe := &pendingEpoch{replies: make([]Reply, len(batch)), left: len(batch), done: make(chan struct{})}
	s.mu.Lock()
	if len(batch) > 0 {
		s.epochs[epoch] = pe
	}
	plan := s.core.plan(epoch, batch, s.quota.take(s.core.roomNeeded(batch)))
	s.quota.give(s.core.takeReleased())
	s.deliverLocked(plan.Done)
	s.mu.Unlock()
	failure := s.readAll(epoch, plan.Reads)
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

// releaseRequests forgets the replies of the requests of the batches ids,
// which their Router has.
func (s *Stash) releaseRequests(ids []MsgID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.core.requests.release(id.Epoch)
	}
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
func (s *Stash) readAll(epoch uint64, reads [][]ringoram.PathRead) error {
	errs := make([]error, len(s.trees))
	var wg sync.WaitGroup
	for t, rs := range reads {
		wg.Go(func() {
			rep := s.readPaths(t, epoch, rs)
			s.mu.Lock()
			done, err := s.core.returned(t, rs, rep.Results, rep.Err())
			s.quota.give(s.core.takeReleased())
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

// readPaths sends tree t the shard's part of epoch, again while it is lost
// in transit (the tree recognises a copy and reads the part once).
func (s *Stash) readPaths(t int, epoch uint64, reads []ringoram.PathRead) ReadPathsReply {
	id := s.net.msgID(Endpoint{LayerStash, s.id}, epoch, uint64(t))
	return exchange(s.net, &s.released, t, id, func(release []MsgID) ReadPathsReply {
		return s.trees[t].ReadPaths(ReadPathsMsg{ID: id, Tree: t, Reads: reads, Release: release})
	})
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

// EvictionBlocks hands a tree's blocks to its eviction
// (stashCore.evictionBlocks), once per eviction.
func (s *Stash) EvictionBlocks(m EvictionBlocksMsg) EvictionBlocksReply {
	s.releaseEviction(m.Release)
	return s.evictBlocks.do(m.ID, func() EvictionBlocksReply {
		s.mu.Lock()
		defer s.mu.Unlock()
		return EvictionBlocksReply{Blocks: s.core.evictionBlocks(m.ID.Sender.Index)}
	})
}

// EvictionDone ends a tree's eviction (stashCore.evictionDone), once.
func (s *Stash) EvictionDone(m EvictionDoneMsg) EvictionDoneReply {
	s.releaseEviction(m.Release)
	return s.evictDone.do(m.ID, func() EvictionDoneReply {
		if len(m.Placed) != len(m.Blocks) {
			return EvictionDoneReply{Status: Status{Code: CodeUnavailable,
				Detail: fmt.Sprintf("treebeard: an eviction placed %d of %d blocks", len(m.Placed), len(m.Blocks))}}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return EvictionDoneReply{Stale: s.core.evictionDone(m.ID.Sender.Index, m.Blocks, m.Placed)}
	})
}

// releaseEviction forgets the replies of an eviction's messages that the
// tree got.
func (s *Stash) releaseEviction(ids []MsgID) {
	s.evictBlocks.release(ids)
	s.evictDone.release(ids)
}

// Admin runs the store's operations on the shard (AdminState,
// AdminInstall, AdminStats), between epochs for the first two.
func (s *Stash) Admin(m AdminMsg) AdminReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m.Op {
	case AdminState:
		return AdminReply{Blocks: s.core.blocks()}
	case AdminInstall:
		return AdminReply{Status: statusOf(s.core.restore(stashSnapshot{ShardBlocks: m.Blocks}))}
	case AdminStats:
		c := s.core
		return AdminReply{Stats: LayerStats{StashSize: len(c.stash), StashMax: c.stats.stashMax,
			RealReads: c.stats.realReads, FakeReads: c.stats.fakeReads, StashHits: c.stats.stashHits,
			Copies: s.accesses.copies.Load() + s.evictBlocks.copies.Load() + s.evictDone.copies.Load(),
			Held:   s.accesses.held() + s.evictBlocks.held() + s.evictDone.held()}}
	}
	return unknownAdmin(LayerStash, m.Op)
}
