package treebeard

import (
	"fmt"
	"maps"
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
// Every input reaches the core as a stashEntry, one at a time: in this
// process through apply, in the order apply takes them, journaled in
// log; or, when the shard is a replicated group (group), as the group's
// committed entries, which this driver proposes as the group's leader
// (stashgroup.go). Either way each entry and its outputs pass through
// afterStep, in the order they are applied (stashmachine.go).
type Stash struct {
	id    int          // the shard's number, which the trees' epoch barriers count by
	trees []PathReader // by tree: the ORAM shard that owns it
	log   *machineLog  // in this process: the shard's log in the store's journal
	group *term        // replicated: the group this driver leads
	net   *netState
	quota *quota // the store's (the shard's share, replicated): each epoch takes the room it may need from it

	released releases      // by tree
	copies   atomic.Uint64 // copies of messages answered from the core's record
	done     completions   // epochs whose replies the core has made

	mu        sync.Mutex
	core      *stashCore
	answering map[MsgID]chan struct{}       // batches being handled: closed once the core holds the reply
	applied   func(stashEntry, stashOutput) // tests: sees every entry and its outputs, in order
}

func newStash(id int, core *stashCore, q *quota, log *machineLog, net *netState) *Stash {
	s := &Stash{id: id, core: core, quota: q, log: log, net: net,
		done: newCompletions(), answering: map[MsgID]chan struct{}{}}
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

// applyLocked applies entry e to the core in this process; s.mu is held.
func (s *Stash) applyLocked(e stashEntry) stashOutput {
	out := s.core.step(e)
	s.afterStep(e, out)
	return out
}

// afterStep does what needs no I/O once the core applied e: it wakes the
// epochs whose replies e completed and gives the room it released back
// to the store. It takes no lock of the driver's: a replicated shard
// runs it on raft's goroutine.
func (s *Stash) afterStep(e stashEntry, out stashOutput) {
	if s.applied != nil {
		s.applied(e, out)
	}
	s.quota.give(out.Released)
	for _, epoch := range out.Complete {
		s.done.complete(epoch)
	}
}

// propose applies es in order as one entry of the shard's group, and
// returns their outputs once it is committed and applied (an error
// leaves their outcome unknown: this driver no longer leads).
func (s *Stash) propose(es ...stashEntry) ([]stashOutput, error) {
	res, err := s.group.propose(stashInputs(es))
	if err != nil {
		return nil, err
	}
	return res.([]stashOutput), nil
}

// apply applies one entry: in this process at once, or as an entry of
// the shard's group (propose).
func (s *Stash) apply(e stashEntry) (stashOutput, error) {
	if s.group != nil {
		outs, err := s.propose(e)
		if err != nil {
			return stashOutput{}, err
		}
		return outs[0], nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(e), nil
}

// Access runs a Router's batch once, however many copies of its message
// arrive (the core's msgTable), and each of its requests once, however
// many batches bring it (requestTable).
func (s *Stash) Access(m AccessMsg) AccessReply {
	out, first, answered, err := s.admit(m)
	if err != nil {
		return AccessReply{Status: lostLead(err)}
	}
	if out.Copy != nil {
		return answerCopy(s, accessReplyCodec, out.Copy, first, func() AccessReply { return s.Access(m) })
	}
	rep := s.access(m, out.Reads)
	s.mu.Lock()
	delete(s.answering, m.ID)
	close(answered)
	s.mu.Unlock()
	return rep
}

// admit applies m's batch, with the room for new keys it took from the
// store, and notes that this driver handles it (answered closes once the
// core holds its reply). A copy gets first instead: the first copy's
// answered, nil when no driver of this shard handles it.
func (s *Stash) admit(m AccessMsg) (out stashOutput, first, answered chan struct{}, err error) {
	e := stashEntry{Kind: entryBatch, Msg: m.ID, Epoch: m.ID.Epoch, Batch: m.Batch}
	if s.group != nil {
		// Other entries may be applied between a look at the core and
		// this one: the room is taken for every request that may create
		// its key, and what the epoch does not use comes back.
		e.Room = s.quota.take(roomAtMost(m.Batch))
		if out, err = s.applyReleasing(m.Release, e); err != nil {
			return out, nil, nil, err
		}
		s.mu.Lock()
	} else {
		s.mu.Lock()
		if !s.core.msgs.has(m.ID) { // a copy plans nothing: it takes no room from the store
			e.Room = s.quota.take(s.core.roomNeeded(m.Batch))
		}
		out = s.applyAllLocked(released(m.Release, e))
	}
	defer s.mu.Unlock()
	if out.Copy != nil {
		return out, s.answering[m.ID], nil, nil
	}
	answered = make(chan struct{})
	s.answering[m.ID] = answered
	return out, nil, answered, nil
}

// released returns e after the release of ids (the replies their sender
// has: the core may forget them), if any.
func released(ids []MsgID, e stashEntry) []stashEntry {
	if len(ids) == 0 {
		return []stashEntry{e}
	}
	return []stashEntry{{Kind: entryRelease, Released: ids}, e}
}

// applyReleasing applies e after the release of ids, and returns e's
// output: in this process under the shard's lock, in a replicated shard
// as one entry of its group, one commit rather than two.
func (s *Stash) applyReleasing(ids []MsgID, e stashEntry) (stashOutput, error) {
	if s.group != nil {
		outs, err := s.propose(released(ids, e)...)
		if err != nil {
			return stashOutput{}, err
		}
		return outs[len(outs)-1], nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyAllLocked(released(ids, e)), nil
}

// applyAllLocked applies es in order in this process and returns the
// last one's output; s.mu is held.
func (s *Stash) applyAllLocked(es []stashEntry) (out stashOutput) {
	for _, e := range es {
		out = s.applyLocked(e)
	}
	return out
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
// every tree, and the reply waits for the batch's own reads, for the
// real reads their blocks are queued behind (the core completes the
// epoch then), and for the epoch's journal record.
func (s *Stash) access(m AccessMsg, reads [][]ringoram.PathRead) AccessReply {
	epoch := m.ID.Epoch
	s.readAll(epoch, reads)
	if len(m.Batch) > 0 {
		select {
		case <-s.done.of(epoch):
			s.done.forget(epoch)
		case <-s.group.deposed():
			return AccessReply{Status: lostLead(errDeposed)}
		}
	}
	return s.journal(epoch)
}

// readAll sends every tree this batch's reads of it, none for most trees
// of a small batch: a tree reads an epoch once every shard has sent its
// part, so which shards hold the epoch's keys never shows.
func (s *Stash) readAll(epoch uint64, reads [][]ringoram.PathRead) {
	parts := make([]sentPart, len(reads))
	for t, rs := range reads {
		parts[t] = sentPart{Epoch: epoch, Tree: t, Reads: rs}
	}
	s.readParts(parts)
}

// readParts sends each part to its tree at once. Each tree's results
// reach the core as an entry: in this process in the order they come
// back; a replicated shard's, all in one entry once every tree answered,
// one commit of the group rather than one per tree. One that cannot be
// applied (a replicated shard's term ended) leaves the epoch to its next
// leader (takeOver).
func (s *Stash) readParts(parts []sentPart) {
	results := make([]stashEntry, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			rep := s.readPaths(p.Tree, p.Epoch, p.Reads)
			results[i] = resultsEntry(p.Epoch, p.Tree, p.Reads, rep.Results, rep.Err())
			if s.group == nil {
				s.apply(results[i])
			}
		})
	}
	wg.Wait()
	if s.group != nil && len(results) > 0 {
		s.propose(results...)
	}
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
// durable, and returns its reply, which leaves only then (the records of
// concurrent epochs share an fsync); when the journal fails, the
// requests that succeeded learn it. The shard's checkpoint is taken
// after the record when its log is due. Once the record is durable, the
// epoch's parts are released: the trees may forget the blocks they read
// for it (handover). A replicated shard's record is the group's commit
// of the epoch's end.
func (s *Stash) journal(epoch uint64) AccessReply {
	if s.group != nil {
		outs, err := s.propose(stashEntry{Kind: entryEpochEnd, Epoch: epoch}, stashEntry{Kind: entryJournaled, Epoch: epoch})
		if err != nil {
			return AccessReply{Status: lostLead(err)}
		}
		s.releaseParts(epoch)
		return answerOf(accessReplyCodec, outs[1].Answer)
	}
	s.mu.Lock()
	out := s.applyLocked(stashEntry{Kind: entryEpochEnd, Epoch: epoch})
	lsn := s.log.Append(out.Record)
	s.log.checkpointIfDue(s.core.checkpointState)
	s.mu.Unlock()
	var failure Status
	if err := s.log.Sync(lsn); err != nil {
		failure = statusOf(fmt.Errorf("treebeard: journal: %w", err))
	} else {
		s.releaseParts(epoch)
	}
	out, _ = s.apply(stashEntry{Kind: entryJournaled, Epoch: epoch, Failure: failure})
	return answerOf(accessReplyCodec, out.Answer)
}

// releaseParts releases the shard's parts of epoch, whose record is
// durable.
func (s *Stash) releaseParts(epoch uint64) {
	for t := range s.trees {
		s.released.add(t, s.partID(epoch, t))
	}
}

// EvictionBlocks hands a tree's blocks to its eviction
// (stashCore.evictionBlocks), once per eviction.
func (s *Stash) EvictionBlocks(m EvictionBlocksMsg) EvictionBlocksReply {
	out, err := s.applyReleasing(m.Release, stashEntry{Kind: entryEvictionBlocks, Msg: m.ID, Tree: m.ID.Sender.Index})
	switch {
	case err != nil:
		return EvictionBlocksReply{Status: lostLead(err)}
	case out.Copy != nil:
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
// the message again (replayer.endEvictions). A replicated shard's record
// is the group's commit of the entry, which the reply waits for.
func (s *Stash) EvictionDone(m EvictionDoneMsg) EvictionDoneReply {
	if len(m.Placed) != len(m.Blocks) {
		return EvictionDoneReply{Status: Status{Code: CodeUnavailable,
			Detail: fmt.Sprintf("treebeard: an eviction placed %d of %d blocks", len(m.Placed), len(m.Blocks))}}
	}
	ids := make([]tree.BlockID, len(m.Blocks))
	for i, b := range m.Blocks {
		ids[i] = b.Block.ID
	}
	out, err := s.evictionDone(m.Release, stashEntry{Kind: entryEvictionDone, Msg: m.ID, Tree: m.ID.Sender.Index, IDs: ids, Placed: m.Placed})
	switch {
	case err != nil:
		return EvictionDoneReply{Status: lostLead(err)}
	case out.Copy != nil:
		return answerCopy(s, evictionDoneReplyCodec, out.Copy, nil, nil)
	}
	return answerOf(evictionDoneReplyCodec, out.Answer)
}

// evictionDone applies an eviction's end after the release of ids, and
// in this process appends its record to the shard's log.
func (s *Stash) evictionDone(ids []MsgID, e stashEntry) (stashOutput, error) {
	if s.group != nil {
		return s.applyReleasing(ids, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.applyAllLocked(released(ids, e))
	if out.Record != nil {
		s.log.Append(out.Record)
		s.log.checkpointIfDue(s.core.checkpointState)
	}
	return out, nil
}

// Admin runs the store's operations on the shard (AdminState,
// AdminInstall, AdminStats, AdminNames), between epochs for the first
// two, which a replicated shard refuses: a cluster loads through its
// Routers.
func (s *Stash) Admin(m AdminMsg) AdminReply {
	switch m.Op {
	case AdminState, AdminInstall:
		if s.group != nil {
			return unknownAdmin(LayerStash, m.Op)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if m.Op == AdminState {
			return AdminReply{Blocks: s.core.blocks()}
		}
		return AdminReply{Status: statusOf(s.core.restore(stashSnapshot{ShardBlocks: m.Blocks}))}
	case AdminNames:
		var names ShardBlocks
		s.view(func(c *stashCore) { names = ShardBlocks{Pos: maps.Clone(c.pos), Names: maps.Clone(c.names)} })
		return AdminReply{Blocks: names}
	case AdminStats:
		var st LayerStats
		s.view(func(c *stashCore) {
			st = LayerStats{StashSize: len(c.stash), StashMax: c.stats.stashMax,
				RealReads: c.stats.realReads, FakeReads: c.stats.fakeReads, StashHits: c.stats.stashHits,
				Held: c.msgs.heldCount()}
		})
		st.Copies = s.copies.Load()
		return AdminReply{Stats: st}
	}
	return unknownAdmin(LayerStash, m.Op)
}

// view calls f with the core between two of its steps.
func (s *Stash) view(f func(*stashCore)) {
	if s.group != nil {
		s.group.view(func() { f(s.core) })
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.core)
}

// completions tells an epoch's waiter that the core has made all the
// epoch's replies. The entry that completes an epoch may be applied
// before its waiter asks (a replicated shard applies entries on raft's
// goroutine), so either side may create the epoch's channel.
type completions struct {
	mu sync.Mutex
	by map[uint64]chan struct{}
}

func newCompletions() completions { return completions{by: map[uint64]chan struct{}{}} }

// of returns the channel closed once epoch is complete.
func (c *completions) of(epoch uint64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chanOf(epoch)
}

func (c *completions) chanOf(epoch uint64) chan struct{} {
	ch := c.by[epoch]
	if ch == nil {
		ch = make(chan struct{})
		c.by[epoch] = ch
	}
	return ch
}

// complete closes epoch's channel.
func (c *completions) complete(epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.chanOf(epoch))
}

// forget drops epoch's channel, once its waiter has seen it closed.
func (c *completions) forget(epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.by, epoch)
}
