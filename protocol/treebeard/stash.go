package treebeard

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Stash is one Stash shard (Treebeard Sec. 5.2): the driver of a
// stashCore, which holds the position map and the stash of the blocks
// hashed to the shard and the per-block request queues that make every
// key linearizable (Sec. 5.2.3: requests to a block are applied in the
// order the shard receives them). Stash owns the I/O: it sends each
// epoch's path reads to the trees' owners, feeds their results back to the
// core, journals each epoch and hands each reply back once it is ready;
// which messages it handled, and their replies, are the core's
// (msgTable), so a copy arriving after a restart or a restore gets the
// stored reply.
// Every input reaches the core as a stashEntry through apply, one at a
// time in the order apply takes them (stashmachine.go).
type Stash struct {
	id    int          // the shard's number, which the trees' epoch barriers count by
	trees []PathReader // by tree: the ORAM shard that owns it
	log   *machineLog
	net   *netState
	quota *quota // the store's: each epoch takes the room it may need from it

	released releases      // by tree
	copies   atomic.Uint64 // copies of messages answered from the core's record

	mu        sync.Mutex
	core      *stashCore
	complete  map[uint64]chan struct{}      // by epoch: closed once the core has made all its replies
	answering map[MsgID]chan struct{}       // batches being handled: closed once the core holds the reply
	applied   func(stashEntry, stashOutput) // tests: sees every entry and its outputs, in order
}

func newStash(id int, core *stashCore, q *quota, log *machineLog, net *netState) *Stash {
	s := &Stash{id: id, core: core, quota: q, log: log, net: net,
		complete: map[uint64]chan struct{}{}, answering: map[MsgID]chan struct{}{}}
	log.again = s.checkpointAgain
	return s
}

// checkpointAgain takes the shard's checkpoint when its log is due: any
// moment the shard's lock is free is between two of its steps.
func (s *Stash) checkpointAgain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log.checkpointIfDue(s.core.checkpointState)
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
// arrive (the core's msgTable), and each of its requests once, however
// many batches bring it (requestTable).
func (s *Stash) Access(m AccessMsg) AccessReply {
	s.release(m.Release)
	s.mu.Lock()
	var room int64
	if !s.core.msgs.has(m.ID) { // a copy plans nothing: it takes no room from the store
		room = s.quota.take(s.core.roomNeeded(m.Batch))
	}
	out := s.applyLocked(stashEntry{Kind: entryBatch, Msg: m.ID, Epoch: m.ID.Epoch, Batch: m.Batch, Room: room})
	if out.Copy != nil {
		first := s.answering[m.ID]
		s.mu.Unlock()
		return answerCopy(s, accessReplyCodec, out.Copy, first, func() AccessReply { return s.Access(m) })
	}
	complete, answered := make(chan struct{}), make(chan struct{})
	if len(m.Batch) == 0 || slices.Contains(out.Complete, m.ID.Epoch) {
		close(complete)
	} else {
		s.complete[m.ID.Epoch] = complete
	}
	s.answering[m.ID] = answered
	s.mu.Unlock()
	rep := s.access(m.ID.Epoch, out.Reads, complete)
	s.mu.Lock()
	delete(s.answering, m.ID)
	close(answered)
	s.mu.Unlock()
	return rep
}

// release tells the core which messages' replies their senders have.
func (s *Stash) release(ids []MsgID) {
	if len(ids) > 0 {
		s.apply(stashEntry{Kind: entryRelease, Released: ids})
	}
}

// answerCopy returns what a copy of a message gets: the stored reply, or
// the refusal, or once the first copy (answered closes then) has its
// reply, again (the stored reply). A copy of a message whose first copy
// no driver of this shard is handling (the shard was restored while it
// was) is answered as lost in transit: its sender sends it again.
func answerCopy[R any, P reply[R]](s *Stash, c wireCodec[R], cp *msgCopy, answered <-chan struct{}, again func() R) R {
	switch {
	case cp.Refused.Code != CodeOK:
		s.copies.Add(1)
		return failedWith[R, P](cp.Refused)
	case cp.Pending && answered == nil:
		return failedWith[R, P](Status{Code: CodeTransport, Detail: "treebeard: a copy of a message whose first copy is still being handled"})
	case cp.Pending:
		<-answered
		return again()
	}
	s.copies.Add(1)
	return answerOf[R, P](c, cp.Reply)
}

// answerOf decodes a reply the core made.
func answerOf[R any, P reply[R]](c wireCodec[R], b []byte) R {
	r, err := c.parse(b)
	if err != nil {
		return failedWith[R, P](Status{Code: CodeUnavailable, Detail: err.Error()})
	}
	return r
}

// access runs a batch (Sec. 5.2.1) whose reads the core planned, with
// the room for new keys taken from the store's quota: the reads go to
// every tree, and the replies wait for the batch's own reads, for the
// real reads their blocks are queued behind (complete closes then), and
// for the epoch's journal record.
func (s *Stash) access(epoch uint64, reads [][]ringoram.PathRead, complete <-chan struct{}) AccessReply {
	s.readAll(epoch, reads)
	<-complete
	return answerOf(accessReplyCodec, s.journal(epoch))
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
// in transit (the tree recognises a copy and reads the part once). The
// part is released once the epoch's record is durable (journal).
func (s *Stash) readPaths(t int, epoch uint64, reads []ringoram.PathRead) ReadPathsReply {
	id := s.partID(epoch, t)
	return sendReleasing(s.net, &s.released, t, func(release []MsgID) ReadPathsReply {
		return s.trees[t].ReadPaths(ReadPathsMsg{ID: id, Tree: t, Reads: reads, Release: release})
	})
}

// partID names the shard's part of epoch for tree t.
func (s *Stash) partID(epoch uint64, t int) MsgID {
	return s.net.msgID(Endpoint{LayerStash, s.id}, epoch, uint64(t))
}

// journal ends the epoch: it appends its record and waits until it is
// durable, and returns its reply, encoded, which leaves only then (the
// records of concurrent epochs share an fsync); when the journal fails,
// the requests that succeeded learn it. The shard's checkpoint is taken
// after the record when its log is due. Once the record is durable, the
// epoch's parts are released: the trees may forget the blocks they read
// for it (handover).
func (s *Stash) journal(epoch uint64) []byte {
	s.mu.Lock()
	out := s.applyLocked(stashEntry{Kind: entryEpochEnd, Epoch: epoch})
	lsn := s.log.Append(out.Record)
	s.log.checkpointIfDue(s.core.checkpointState)
	s.mu.Unlock()
	var failure Status
	if err := s.log.Sync(lsn); err != nil {
		failure = statusOf(fmt.Errorf("treebeard: journal: %w", err))
	} else {
		for t := range s.trees {
			s.released.add(t, s.partID(epoch, t))
		}
	}
	return s.apply(stashEntry{Kind: entryJournaled, Epoch: epoch, Failure: failure}).Answer
}

// EvictionBlocks hands a tree's blocks to its eviction
// (stashCore.evictionBlocks), once per eviction.
func (s *Stash) EvictionBlocks(m EvictionBlocksMsg) EvictionBlocksReply {
	s.release(m.Release)
	out := s.apply(stashEntry{Kind: entryEvictionBlocks, Msg: m.ID, Tree: m.ID.Sender.Index})
	if out.Copy != nil {
		return answerCopy(s, evictionBlocksReplyCodec, out.Copy, nil, nil)
	}
	return answerOf(evictionBlocksReplyCodec, out.Answer)
}

// EvictionDone ends a tree's eviction (stashCore.evictionDone), once,
// and journals which blocks left the stash and the reply (and the
// shard's checkpoint after it, when its log is due). The record is
// not waited for: the tree's record of the eviction's end, which lets it
// forget the eviction, comes after it in the store's one journal, which
// makes records durable in order; until then a crash makes the tree send
// the message again (replayer.endEvictions).
func (s *Stash) EvictionDone(m EvictionDoneMsg) EvictionDoneReply {
	s.release(m.Release)
	if len(m.Placed) != len(m.Blocks) {
		return EvictionDoneReply{Status: Status{Code: CodeUnavailable,
			Detail: fmt.Sprintf("treebeard: an eviction placed %d of %d blocks", len(m.Placed), len(m.Blocks))}}
	}
	ids := make([]tree.BlockID, len(m.Blocks))
	for i, b := range m.Blocks {
		ids[i] = b.Block.ID
	}
	s.mu.Lock()
	out := s.applyLocked(stashEntry{Kind: entryEvictionDone, Msg: m.ID, Tree: m.ID.Sender.Index, IDs: ids, Placed: m.Placed})
	if out.Record != nil {
		s.log.Append(out.Record)
		s.log.checkpointIfDue(s.core.checkpointState)
	}
	s.mu.Unlock()
	if out.Copy != nil {
		return answerCopy(s, evictionDoneReplyCodec, out.Copy, nil, nil)
	}
	return answerOf(evictionDoneReplyCodec, out.Answer)
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
			Copies: s.copies.Load(), Held: c.msgs.heldCount()}}
	}
	return unknownAdmin(LayerStash, m.Op)
}
