package treebeard

import (
	"fmt"
	"sync"

	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Stash is one Stash shard (Treebeard Sec. 5.2): the driver of a
// stashCore, which holds the position map and the stash of the blocks
// hashed to the shard and the per-block request queues that make every
// key linearizable (Sec. 5.2.3: requests to a block are applied in the
// order the shard receives them). Stash owns the I/O: it sends each
// epoch's path reads to the trees' owners, feeds their results back to the
// core, journals each epoch and hands each reply back once it is ready.
// Every input reaches the core as a stashEntry through apply, one at a
// time in the order apply takes them (stashmachine.go).
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

	mu       sync.Mutex
	core     *stashCore
	complete map[uint64]chan struct{}      // by epoch: closed once the core has made all its replies
	applied  func(stashEntry, stashOutput) // tests: sees every entry and its outputs, in order
}

func newStash(id int, core *stashCore, q *quota, log *durable.Log, net *netState) *Stash {
	return &Stash{id: id, core: core, quota: q, log: log, net: net, complete: map[uint64]chan struct{}{},
		accesses: newAnswered[AccessReply](), evictBlocks: newAnswered[EvictionBlocksReply](),
		evictDone: newAnswered[EvictionDoneReply]()}
}

// connect gives the shard the owner of each tree.
func (s *Stash) connect(trees []PathReader) { s.trees = trees }

// applyLocked applies entry e to the core, wakes the epochs whose replies
// it completed and gives the room it released back to the store; s.mu is
// held.
func (s *Stash) applyLocked(e stashEntry) stashOutput {
	out := s.core.step(e)
	if s.applied != nil {
		s.applied(e, out)
	}
	s.quota.give(out.Released)
	for _, epoch := range out.Complete {
		if ch := s.complete[epoch]; ch != nil {
			close(ch)
			delete(s.complete, epoch)
		}
	}
	return out
}

// apply is applyLocked, taking s.mu.
func (s *Stash) apply(e stashEntry) stashOutput {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(e)
}

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

// releaseRequests forgets the replies of the requests of the batches ids,
// which their Router has.
func (s *Stash) releaseRequests(ids []MsgID) {
	if len(ids) == 0 {
		return
	}
	e := stashEntry{Kind: entryRelease}
	for _, id := range ids {
		e.Released = append(e.Released, id.Epoch)
	}
	s.apply(e)
}

// access runs a batch (Sec. 5.2.1): the core plans one path read per
// request, with the room for new keys taken from the store's quota, the
// reads go to every tree, and the replies wait for the batch's own reads,
// for the real reads their blocks are queued behind, and for the epoch's
// journal record.
func (s *Stash) access(epoch uint64, batch []Request) []Reply {
	complete := make(chan struct{})
	s.mu.Lock()
	s.complete[epoch] = complete
	if len(batch) == 0 {
		delete(s.complete, epoch)
		close(complete)
	}
	out := s.applyLocked(stashEntry{Kind: entryBatch, Epoch: epoch, Batch: batch, Room: s.quota.take(s.core.roomNeeded(batch))})
	s.mu.Unlock()
	s.readAll(epoch, out.Reads)
	<-complete
	replies, err := s.journal(epoch)
	if err != nil {
		for i := range replies {
			if replies[i].Code == CodeOK {
				replies[i] = failed(err)
			}
		}
	}
	return replies
}

// readAll sends every tree this batch's reads of it, none for most trees
// of a small batch: a tree reads an epoch once every shard has sent its
// part, so which shards hold the epoch's keys never shows. Each tree's
// results reach the core as an entry, in the order they come back.
func (s *Stash) readAll(epoch uint64, reads [][]ringoram.PathRead) {
	var wg sync.WaitGroup
	for t, rs := range reads {
		wg.Go(func() {
			rep := s.readPaths(t, epoch, rs)
			s.apply(resultsEntry(epoch, t, rs, rep.Results, rep.Err()))
		})
	}
	wg.Wait()
}

// readPaths sends tree t the shard's part of epoch, again while it is lost
// in transit (the tree recognises a copy and reads the part once).
func (s *Stash) readPaths(t int, epoch uint64, reads []ringoram.PathRead) ReadPathsReply {
	id := s.net.msgID(Endpoint{LayerStash, s.id}, epoch, uint64(t))
	return exchange(s.net, &s.released, t, id, func(release []MsgID) ReadPathsReply {
		return s.trees[t].ReadPaths(ReadPathsMsg{ID: id, Tree: t, Reads: reads, Release: release})
	})
}

// journal ends the epoch: it appends its record and waits until it is
// durable, and returns its replies, which leave only then (the records of
// concurrent epochs share an fsync).
func (s *Stash) journal(epoch uint64) ([]Reply, error) {
	s.mu.Lock()
	out := s.applyLocked(stashEntry{Kind: entryEpochEnd, Epoch: epoch})
	lsn := s.log.Append(out.Record)
	s.mu.Unlock()
	if err := s.log.Sync(lsn); err != nil {
		return out.Replies, fmt.Errorf("treebeard: journal: %w", err)
	}
	return out.Replies, nil
}

// EvictionBlocks hands a tree's blocks to its eviction
// (stashCore.evictionBlocks), once per eviction.
func (s *Stash) EvictionBlocks(m EvictionBlocksMsg) EvictionBlocksReply {
	s.releaseEviction(m.Release)
	return s.evictBlocks.do(m.ID, func() EvictionBlocksReply {
		return EvictionBlocksReply{Blocks: s.apply(stashEntry{Kind: entryEvictionBlocks, Tree: m.ID.Sender.Index}).Blocks}
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
		ids := make([]tree.BlockID, len(m.Blocks))
		for i, b := range m.Blocks {
			ids[i] = b.Block.ID
		}
		return EvictionDoneReply{Stale: s.apply(stashEntry{Kind: entryEvictionDone, Tree: m.ID.Sender.Index, IDs: ids, Placed: m.Placed}).Stale}
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
