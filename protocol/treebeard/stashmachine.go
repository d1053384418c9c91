package treebeard

import (
	"fmt"
	"maps"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// A Stash shard as a machine a log can drive: every input of its core is
// a stashEntry, applied in the order the driver logs them (the order in
// which the trees' results come back is the log's, not the goroutines'),
// and apply returns everything the entry makes the shard do. The same
// snapshot (stashImage) and the same entries give the same outputs and
// the same final snapshot, byte for byte, whether the snapshot was taken
// between epochs or with reads in flight.

// stashEntryKind is what a stashEntry brings.
type stashEntryKind uint8

const (
	entryBatch          stashEntryKind = iota + 1 // a Router's batch of an epoch, with the room its new keys may take
	entryResults                                  // tree Tree's results of the shard's part of epoch Epoch
	entryEpochEnd                                 // every part of epoch Epoch has returned: its journal record
	entryEvictionBlocks                           // tree Tree's eviction asks for its blocks
	entryEvictionDone                             // tree Tree's eviction placed IDs at Placed
	entryRelease                                  // senders have the replies to the messages Released
	entryJournaled                                // epoch Epoch's record is durable, or the journal failed (Failure)
	entryTaken                                    // recovery: blocks tree Tree's reads took out whose epochs' records never came
)

// stashEntry is one input of a Stash shard. Only the fields of its Kind
// are set; a tree's results hold the real reads' outcomes alone (fake
// reads return nothing the state depends on). A Router's batch and an
// eviction's messages carry their message's id (Msg): a copy of a
// message handled already gets its stored reply (msgTable).
type stashEntry struct {
	Kind     stashEntryKind
	Msg      MsgID // entryBatch, entryEvictionBlocks, entryEvictionDone
	Epoch    uint64
	Batch    []Request
	Room     int64
	Tree     int
	Real     []ringoram.ReadResult // entryResults: per real read, in order: its block (ID: the one wanted) and whether it was found
	Failure  Status                // entryResults: the tree's read failed; entryJournaled: the journal failed
	IDs      []tree.BlockID        // entryEvictionDone: the blocks handed over
	Placed   []int64               // entryEvictionDone: their buckets, or -1
	Released []MsgID               // entryRelease: messages whose replies their senders have
	Taken    []ringoram.Block      // entryTaken: each block with the leaf it was read from
}

// stashOutput is what an entry makes the shard do.
type stashOutput struct {
	Reads    [][]ringoram.PathRead // entryBatch: the paths to read, by tree
	Complete []uint64              // epochs whose replies are all made now
	Record   []byte                // the journal record: entryEpochEnd's, entryEvictionDone's
	Answer   []byte                // the reply to the entry's message, encoded: entryJournaled (the epoch's batch), entryEvictionBlocks, entryEvictionDone
	Copy     *msgCopy              // the entry's message was handled already: what its copy gets
	Released int64                 // room for keys given back to the store's quota
}

// epochReplies is an epoch's replies as the shard makes them, until its
// record is durable.
type epochReplies struct {
	Msg     MsgID // the batch's message
	Replies []Reply
	Left    int            // replies not made yet
	IDs     []tree.BlockID // the blocks the batch names, in its order
	Failure Status         // a path read of the epoch failed: its requests' outcome is unknown
	// Parts holds, per tree, the reads of the epoch's part sent to it,
	// and Back which trees' results came back: a driver taking the shard
	// over sends the others again (outstanding).
	Parts [][]ringoram.PathRead
	Back  []bool
}

// step applies entry e and returns its outputs.
func (c *stashCore) step(e stashEntry) stashOutput {
	var out stashOutput
	switch e.Kind {
	case entryBatch:
		if out.Copy = c.msgs.admit(e.Msg, kindAccessReply); out.Copy != nil {
			c.released += e.Room // a copy plans nothing
			break
		}
		c.openEpoch(e.Epoch, e.Msg, e.Batch)
		p := c.plan(e.Epoch, e.Batch, e.Room)
		ep := c.epochs[e.Epoch]
		ep.Parts, ep.Back = p.Reads, make([]bool, c.trees)
		out.Reads = p.Reads
		out.Complete = c.assemble(p.Done)
	case entryResults:
		if !c.partBack(e.Epoch, e.Tree) {
			break // a copy of results applied already
		}
		done := c.applyResults(e)
		if ep := c.epochs[e.Epoch]; ep != nil && e.Failure.Code != CodeOK && ep.Failure.Code == CodeOK {
			ep.Failure = e.Failure
		}
		out.Complete = c.assemble(done)
	case entryEpochEnd:
		out.Record = c.closeEpoch(e.Epoch)
	case entryJournaled:
		out.Answer = c.answerEpoch(e.Epoch, e.Failure)
	case entryEvictionBlocks:
		if out.Copy = c.msgs.admit(e.Msg, kindEvictionBlocksReply); out.Copy == nil {
			out.Answer = c.answer(e.Msg, evictionBlocksReplyCodec.encode(EvictionBlocksReply{Blocks: c.evictionBlocks(e.Tree)}))
		}
	case entryEvictionDone:
		if out.Copy = c.msgs.admit(e.Msg, kindEvictionDoneReply); out.Copy == nil {
			stale := c.evictionDone(e.Tree, e.IDs, e.Placed)
			out.Answer = c.answer(e.Msg, evictionDoneReplyCodec.encode(EvictionDoneReply{Stale: stale}))
			out.Record = evictedDelta(e.Msg, removed(e.IDs, e.Placed, stale), out.Answer)
		}
	case entryRelease:
		c.release(e.Released)
	case entryTaken:
		c.takeBack(e.Tree, e.Taken)
	}
	out.Released = c.takeReleased()
	return out
}

// openEpoch starts assembling the replies of epoch's batch, brought by
// message msg.
func (c *stashCore) openEpoch(epoch uint64, msg MsgID, batch []Request) {
	ids := make([]tree.BlockID, len(batch))
	for i, r := range batch {
		ids[i] = r.ID
	}
	c.epochs[epoch] = &epochReplies{Msg: msg, Replies: make([]Reply, len(batch)), Left: len(batch), IDs: ids}
}

// partBack notes that tree t's results of epoch's part came back, and
// reports whether they are the first: a copy of results applied already,
// or of an epoch closed (all of whose parts came back), is not.
func (c *stashCore) partBack(epoch uint64, t int) bool {
	ep := c.epochs[epoch]
	if ep == nil || t < 0 || t >= len(ep.Back) || ep.Back[t] {
		return false
	}
	ep.Back[t] = true
	return true
}

// sentPart is a part of an epoch a Stash shard sent a tree: the reads it
// asks for.
type sentPart struct {
	Epoch uint64
	Tree  int
	Reads []ringoram.PathRead
}

// outstanding returns the parts whose results have not come back, by
// epoch and tree: what a driver taking the shard over sends again, under
// the same ids, with the same reads (a tree answers a copy of a part it
// read from its record, msgTable). Nothing else is owed: a Router whose
// batch's reply was lost sends the batch again, and a tree its eviction's
// messages, and both get the stored reply.
func (c *stashCore) outstanding() []sentPart {
	var out []sentPart
	for _, epoch := range slices.Sorted(maps.Keys(c.epochs)) {
		ep := c.epochs[epoch]
		for t, back := range ep.Back {
			if !back {
				out = append(out, sentPart{Epoch: epoch, Tree: t, Reads: ep.Parts[t]})
			}
		}
	}
	return out
}

// answer stores reply, encoded, as the reply to message msg, and returns
// it.
func (c *stashCore) answer(msg MsgID, reply []byte) []byte {
	c.msgs.answer(msg, reply)
	return reply
}

// release forgets the replies to messages ids, which their senders have:
// a batch's, and those of the requests it brought (requestTable).
func (c *stashCore) release(ids []MsgID) {
	for _, id := range ids {
		c.msgs.release(id)
		if id.Sender.Layer == LayerRouter {
			c.requests.release(id.Epoch)
		}
	}
}

// assemble files completions under their epochs and returns the epochs
// whose replies are all made by them.
func (c *stashCore) assemble(done []completion) []uint64 {
	var complete []uint64
	for _, d := range done {
		ep := c.epochs[d.To.Epoch]
		if ep == nil {
			continue // an epoch its driver planned by plan alone (tests)
		}
		ep.Replies[d.To.Index] = d.Reply
		if ep.Left--; ep.Left == 0 {
			complete = append(complete, d.To.Epoch)
		}
	}
	return complete
}

// closeEpoch ends an epoch whose replies are all made and whose parts
// have all returned: its replies are final (a request whose epoch had a
// path read fail learns it, even if it was answered from the stash: fake
// reads are tied to no request) but for the journal's outcome
// (answerEpoch), and it returns its journal record.
func (c *stashCore) closeEpoch(epoch uint64) []byte {
	ep := c.epochs[epoch]
	if ep == nil {
		return c.endEpoch(nil)
	}
	if ep.Failure.Code != CodeOK {
		ep.failSucceeded(Status{Code: ep.Failure.Code, Detail: "treebeard: a path read of this epoch failed: " + ep.Failure.Detail})
	}
	return c.endEpoch(ep.IDs)
}

// failSucceeded makes every request of the epoch that succeeded fail
// with st instead.
func (ep *epochReplies) failSucceeded(st Status) {
	for i := range ep.Replies {
		if ep.Replies[i].Code == CodeOK {
			ep.Replies[i] = Reply{Status: st}
		}
	}
}

// answerEpoch ends an epoch whose record went to the journal: its reply,
// stored for copies of its batch and returned, encoded; every request
// that succeeded learns the journal's failure, if it failed (its outcome
// is unknown).
func (c *stashCore) answerEpoch(epoch uint64, journal Status) []byte {
	ep := c.epochs[epoch]
	if ep == nil {
		return nil
	}
	delete(c.epochs, epoch)
	if journal.Code != CodeOK {
		ep.failSucceeded(journal)
	}
	return c.answer(ep.Msg, accessReplyCodec.encode(AccessReply{Replies: ep.Replies}))
}

// resultsEntry reduces tree t's answer (results, or its failure err) to
// the reads of it that plan asked for to an entry: the outcome of each
// real read, and the failure of the whole part (err, or a tree that
// answered fewer reads than asked).
func resultsEntry(epoch uint64, t int, reads []ringoram.PathRead, results []ringoram.ReadResult, err error) stashEntry {
	if err == nil && len(results) != len(reads) {
		err = fmt.Errorf("treebeard: tree %d answered %d of %d reads", t, len(results), len(reads))
	}
	e := stashEntry{Kind: entryResults, Epoch: epoch, Tree: t, Failure: statusOf(err)}
	for i, r := range reads {
		if !r.Real {
			continue
		}
		res := ringoram.ReadResult{Block: tree.Block{ID: r.Want}}
		if err == nil && results[i].Found {
			res = ringoram.ReadResult{Block: tree.Block{ID: r.Want, Value: results[i].Block.Value}, Found: true}
		}
		e.Real = append(e.Real, res)
	}
	return e
}

// applyResults answers the requests queued behind each real read of e,
// in their order of arrival (settle): with the block's value, or with
// e's failure.
func (c *stashCore) applyResults(e stashEntry) []completion {
	var done []completion
	for _, res := range e.Real {
		err := e.Failure.Err()
		switch {
		case err != nil:
		case !res.Found:
			err = fmt.Errorf("%w: a block is missing from its path", kv.ErrTampered)
		}
		done = c.settle(res.Block.ID, res.Block.Value, err, done)
	}
	return done
}
