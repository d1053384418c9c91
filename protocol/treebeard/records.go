package treebeard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The journal's records (internal/durable) carry one of these deltas of
// a machine's state (logs.go): a Stash shard's are deltaBlocks and
// deltaShardEvicted, a tree's deltaPlan, deltaOp, deltaTreeEvicted and
// deltaLoad; an earlier build journaled them all, and deltaTree and
// deltaEvictDone, as machine 0 (reopenEarlier). A tree's record (deltaOp)
// holds no sealed item: recovery tells which of each tree's operations
// since the checkpoint landed and runs the others again (settleOps).
const (
	deltaBlocks       byte = iota + 1 // a Stash shard's epoch: where its blocks are now, the stashed ones' values and names
	deltaTree                         // a tree's multi-path read or eviction as the previous build journaled it: its ringoram.Change with the top buckets' values, the tree's read count, and the sealed items of its Write, which recovery issues again
	deltaEvictDone                    // an eviction's end as an earlier build journaled it: the blocks that left the stash, the copies it left stale
	deltaLoad                         // a bulk load begins: the trees are rewritten whole
	deltaPlan                         // a tree's multi-path read or eviction is about to read: its ringoram.Plan
	deltaOp                           // a tree's multi-path read or eviction: its ringoram.Change (top buckets as block IDs), the tree's read count, and (since per-machine logs) the blocks it took out for their Stash shards (handover)
	deltaShardEvicted                 // a Stash shard answered the end of an eviction: its message, the blocks that left the stash, its reply
	deltaTreeEvicted                  // the end of a tree's eviction: the copies it left stale
)

// How an epoch's record (blocksDelta) holds a block that exists: in its
// tree, or stashed with its value, and then its name if the shard holds
// one. A block an epoch stored is stashed at the epoch's end, so the
// record of the epoch that names it holds the name. An earlier build's
// records have no stashedNamed.
const (
	inTree byte = iota
	stashedUnnamed
	stashedNamed
)

// blocksDelta describes the blocks an epoch touched, as they are now.
func (s *stashCore) blocksDelta(ids []tree.BlockID) []byte {
	b := binary.AppendUvarint([]byte{deltaBlocks}, uint64(len(ids)))
	for _, id := range ids {
		b = append(b, id[:]...)
		p, exists := s.pos[id]
		if !exists {
			b = append(b, 0)
			continue
		}
		b = binary.AppendUvarint(binary.AppendUvarint(append(b, 1), uint64(p.Tree)), p.Leaf)
		st, stashed := s.stash[id]
		name, named := s.names[id]
		switch {
		case !stashed:
			b = append(b, inTree)
		case named:
			b = delta.AppendBytes(delta.AppendBytes(append(b, stashedNamed), st.value), []byte(name))
		default:
			b = delta.AppendBytes(append(b, stashedUnnamed), st.value)
		}
	}
	return b
}

// opDelta describes an operation of tree t: its Change, and the tree's
// path reads since its last eviction once the operation is done. It holds
// the values the operation moved between the tree and the stash (the
// blocks a read took out, the blocks an eviction placed), and of the top
// buckets it changed only which blocks they hold: the rest of their
// values are in the state the record applies to (ringoram.Tree.ResolveTop).
func opDelta(t, reads int, c ringoram.Change) []byte {
	b := binary.AppendUvarint([]byte{deltaOp}, uint64(t))
	b = binary.AppendUvarint(b, uint64(reads))
	b = binary.AppendUvarint(b, uint64(c.Evicted))
	b = binary.AppendUvarint(b, uint64(len(c.Buckets)))
	for _, bv := range c.Buckets {
		b = delta.AppendBool(binary.AppendUvarint(binary.AppendUvarint(b, bv.Bucket), bv.Version), bv.Full)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Taken)))
	for _, blk := range c.Taken {
		b = delta.AppendBytes(append(b, blk.ID[:]...), blk.Value)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Placed)))
	for _, p := range c.Placed {
		b = binary.AppendUvarint(append(b, p.ID[:]...), p.Bucket)
		b = delta.AppendBytes(binary.AppendUvarint(b, p.Leaf), p.Value)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Top)))
	for _, tb := range c.Top {
		b = binary.AppendUvarint(binary.AppendUvarint(b, tb.Bucket), uint64(len(tb.Blocks)))
		for _, blk := range tb.Blocks {
			b = binary.AppendUvarint(append(b, blk.Block.ID[:]...), blk.Leaf)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(c.Lifted)))
	for _, blk := range c.Lifted {
		b = delta.AppendBytes(append(b, blk.ID[:]...), blk.Value)
	}
	return b
}

// planDelta describes an operation of tree t about to read slots: its
// Plan, which recovery resumes if the operation's own record never came.
func planDelta(t int, p ringoram.Plan) []byte {
	b := binary.AppendUvarint([]byte{deltaPlan}, uint64(t))
	b = append(b, p.Seed[:]...)
	b = binary.AppendUvarint(b, uint64(p.Evict))
	b = binary.AppendUvarint(b, uint64(len(p.Reads)))
	for _, r := range p.Reads {
		b = delta.AppendBool(binary.AppendUvarint(b, r.Leaf), r.Real)
		if r.Real {
			b = append(b, r.Want[:]...)
		}
	}
	return b
}

// treeEvictedDelta describes the end of an eviction of tree t: the
// copies it placed that are stale.
func treeEvictedDelta(t int, stale []Stale) []byte {
	b := binary.AppendUvarint([]byte{deltaTreeEvicted}, uint64(t))
	b = binary.AppendUvarint(b, uint64(len(stale)))
	for _, st := range stale {
		b = binary.AppendUvarint(append(b, st.ID[:]...), st.Bucket)
	}
	return b
}

// evictedDelta describes a Stash shard's answer to the end of an
// eviction, message msg: the blocks that left its stash, and its reply
// (encoded), which a copy of the message gets.
func evictedDelta(msg MsgID, removed []tree.BlockID, reply []byte) []byte {
	b := append([]byte{deltaShardEvicted}, appendMsgID(nil, msg)...)
	b = binary.AppendUvarint(b, uint64(len(removed)))
	for _, id := range removed {
		b = append(b, id[:]...)
	}
	return delta.AppendBytes(b, reply)
}

// appendHandovers appends to a tree's operation record what only the
// tree's log keeps of it (since per-machine logs): the store's
// incarnation when it ran, which its eviction's messages carried, and the
// blocks its reads took out for their Stash shards, each as its ID (its
// value is the Change's), the part that asked for it (none: a recovery's
// read) and the leaf it was read from.
func appendHandovers(b []byte, incarnation uint64, hs []handover) []byte {
	b = binary.AppendUvarint(b, incarnation)
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = delta.AppendBool(append(b, h.Block.Block.ID[:]...), h.Part != MsgID{})
		if h.Part != (MsgID{}) {
			b = binary.AppendUvarint(binary.AppendUvarint(b, uint64(h.Part.Sender.Index)), h.Part.Epoch)
		}
		b = binary.AppendUvarint(b, h.Block.Leaf)
	}
	return b
}

var errMalformed = errors.New("treebeard: malformed journal record")

// replayer applies journal records to the machines' state, in order, as
// the operations that wrote them did: each tree's own records (treeReplay,
// tree set) or, for an earlier build's journal, every record of the
// store (earlier set: reopenEarlier).
type replayer struct {
	s       *store
	earlier bool // the records are an earlier build's, of the whole store
	tree    int  // the tree whose records are replayed (!earlier)
	// pending holds, per tree, the placements of an eviction whose end is
	// not in the journal.
	pending map[int]pendingEviction
	// plans holds, per tree, the plan of an operation that read and never
	// committed: a crash cut it short.
	plans map[int]ringoram.Plan
	// ops holds, per tree, its operations journaled, not yet applied to
	// the tree: their Writes may not have reached storage (settleOps).
	ops  map[int][]*journaledOp
	load bool // a bulk load began and never checkpointed
}

// pendingEviction is an eviction whose end is not in the journal: its
// placements, and the id of the message that reported them.
type pendingEviction struct {
	placed []ringoram.Placement
	msg    MsgID
}

func newReplayer(s *store, earlier bool) *replayer {
	return &replayer{s: s, earlier: earlier, pending: map[int]pendingEviction{}, plans: map[int]ringoram.Plan{}, ops: map[int][]*journaledOp{}}
}

// journaledOp is a tree's operation as its records have it: its plan, its
// Change, and the copies the end of its eviction left stale, forgotten
// once the Change is applied.
type journaledOp struct {
	plan   ringoram.Plan
	change ringoram.Change
	stale  []Stale
}

// apply applies a record: of any kind in an earlier build's journal, of
// the tree's kinds in a tree's log.
func (rp *replayer) apply(rec []byte) error {
	d := delta.NewDecoder(rec)
	switch kind := d.Byte(); {
	case kind == deltaBlocks && rp.earlier:
		replayBlocks(d, rp.s, rp.shard)
	case kind == deltaTree && rp.earlier:
		rp.treeOp(d)
	case kind == deltaEvictDone && rp.earlier:
		rp.evictDone(d, true)
	case kind == deltaTreeEvicted && !rp.earlier:
		rp.evictDone(d, false)
	case kind == deltaLoad:
		rp.load = true
	case kind == deltaPlan:
		rp.plan(d)
	case kind == deltaOp:
		rp.op(d)
	default:
		d.Check(d.Failed(), fmt.Sprint("a delta of kind ", kind))
	}
	if err := d.Done(); err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	return nil
}

// shard returns the core of block id's Stash shard (the shards do not
// run yet).
func (rp *replayer) shard(id tree.BlockID) *stashCore {
	return rp.s.stashes[shardOf(id, len(rp.s.stashes))].core
}

// replayBlocks applies a Stash shard's epoch record (deltaBlocks) to the
// shards shard names.
func replayBlocks(d *delta.Decoder, s *store, shard func(tree.BlockID) *stashCore) {
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		id := readID(d)
		sh := shard(id)
		if !d.Bool() {
			sh.forget(id)
			continue
		}
		t, leaf := d.Uvarint(), d.Uvarint()
		d.Check(t < uint64(len(s.workers)) && leaf < s.geo.Leaves(), "a position outside the trees")
		where, value, name := d.Byte(), []byte(nil), []byte(nil)
		d.Check(where <= stashedNamed, "where a block is")
		if where != inTree {
			value = d.Bytes(s.valueSize)
		}
		if where == stashedNamed {
			name = d.Bytes(tree.MaxNameSize)
		}
		if d.Failed() {
			return
		}
		sh.setPosition(id, Position{Tree: int(t), Leaf: leaf})
		if where == stashedNamed {
			sh.setName(id, string(name))
		}
		if where == inTree {
			sh.unstash(id)
		} else {
			sh.setStashed(id, value)
		}
	}
}

// replayEvicted applies a Stash shard's answer to the end of an eviction
// (deltaShardEvicted) to its core: the blocks left the stash, and a copy
// of the message gets the reply.
func replayEvicted(d *delta.Decoder, c *stashCore) {
	msg := decodeMsgID(d)
	var ids []tree.BlockID
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		ids = append(ids, readID(d))
	}
	reply := d.Bytes(math.MaxInt)
	if d.Failed() {
		return
	}
	for _, id := range ids {
		c.unstash(id)
	}
	c.msgs.admit(msg, kindEvictionDoneReply)
	c.msgs.answer(msg, reply)
}

// treeOf reads the tree a record names, which must be the one replayed.
func (rp *replayer) treeOf(d *delta.Decoder) int {
	t := d.Uvarint()
	d.Check(t < uint64(len(rp.s.workers)) && (rp.earlier || int(t) == rp.tree), "a tree that is not the record's machine")
	if d.Failed() {
		return 0
	}
	return int(t)
}

// op replays a tree's operation (deltaOp): the read count and the blocks
// it took are applied at once, its Change once the tree's next operation
// shows that its Write landed, or by settleLast.
func (rp *replayer) op(d *delta.Decoder) {
	t, reads, c := rp.changeHead(d)
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		p := ringoram.Placement{ID: readID(d), Bucket: d.Uvarint(), Leaf: d.Uvarint(), Value: d.Bytes(rp.s.valueSize)}
		d.Check(p.Leaf < rp.s.geo.Leaves(), "a placed block's leaf outside the tree")
		c.Placed = append(c.Placed, p)
	}
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		tb := ringoram.TopBucket{Bucket: d.Uvarint()}
		for m := d.Count(); m > 0 && !d.Failed(); m-- {
			tb.Blocks = append(tb.Blocks, ringoram.Block{Block: tree.Block{ID: readID(d)}, Leaf: d.Uvarint()})
		}
		c.Top = append(c.Top, tb)
	}
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		c.Lifted = append(c.Lifted, tree.Block{ID: readID(d), Value: d.Bytes(rp.s.valueSize)})
	}
	incarnation, hs := rp.handovers(d, t, c.Taken)
	p, planned := rp.plans[t]
	d.Check(planned, "an operation whose plan is not in the journal")
	d.Check(rp.earlier || hs != nil, "an operation without its handovers")
	if d.Failed() {
		return
	}
	delete(rp.plans, t) // the operation committed
	rp.ops[t] = append(rp.ops[t], &journaledOp{plan: p, change: c})
	w := rp.s.workers[t]
	w.core.reads = reads
	if hs == nil { // an earlier build's record: the blocks go to their stashes now
		rp.s.stashTaken(c.Taken)
	} else {
		w.m.handOver(*hs, placedIDs(c.Placed))
	}
	if c.Evicted > 0 {
		number := w.core.nextEviction() // the number its messages carried
		rp.pending[t] = pendingEviction{placed: c.Placed, msg: MsgID{Sender: Endpoint{LayerORAM, t}, Incarnation: incarnation, Epoch: number, Seq: 1}}
	}
}

// handovers reads what an operation record of tree t holds after its
// Change since per-machine logs (appendHandovers), the blocks' values
// taken from taken; nil for an earlier build's record.
func (rp *replayer) handovers(d *delta.Decoder, t int, taken []tree.Block) (uint64, *[]handover) {
	if !d.More() {
		return 0, nil
	}
	incarnation, hs := d.Uvarint(), []handover{}
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		h := handover{Block: ringoram.Block{Block: tree.Block{ID: readID(d)}}}
		if d.Bool() {
			h.Part = MsgID{Sender: Endpoint{LayerStash, int(d.Uvarint())}, Incarnation: incarnation, Epoch: d.Uvarint(), Seq: uint64(t)}
		}
		h.Block.Leaf = d.Uvarint()
		i := slices.IndexFunc(taken, func(b tree.Block) bool { return b.ID == h.Block.Block.ID })
		d.Check(i >= 0 && h.Block.Leaf < rp.s.geo.Leaves(), "a block handed over that the operation did not take")
		if d.Failed() {
			return 0, nil
		}
		h.Block.Block.Value = taken[i].Value
		hs = append(hs, h)
	}
	return incarnation, &hs
}

func placedIDs(placed []ringoram.Placement) []tree.BlockID {
	ids := make([]tree.BlockID, len(placed))
	for i, p := range placed {
		ids[i] = p.ID
	}
	return ids
}

// settleOps applies each tree's operations journaled, in order, once the
// records are replayed: those whose Writes reached storage as their
// records say, the rest run again under their plans, each writing
// (ringoram.Driver.Redo: Treebeard Sec. 5.3.3 lets an operation be read
// again with the slots it chose, and the plan's seed draws the same ones).
func (rp *replayer) settleOps(ctx context.Context) error {
	for t, w := range rp.s.workers {
		ops := rp.ops[t]
		delete(rp.ops, t)
		missing, err := firstMissing(ctx, w, ops)
		for i := 0; i < len(ops) && err == nil; i++ {
			err = rp.settle(ctx, w, ops[i], i < missing)
		}
		if err != nil {
			return fmt.Errorf("treebeard: tree %d: an operation's Write: %w", t, err)
		}
	}
	return nil
}

// firstMissing returns the index of the first of a tree's operations
// whose Write did not reach storage (treeWorker.landed), len(ops) when
// all did. Storage holds a prefix of a tree's Writes (each goes before the
// tree's next Read, and a power loss drops the Writes after the last
// sync), so it checks the last, then searches: a crash leaves at most the
// last Write out, a power loss those since the last checkpoint.
func firstMissing(ctx context.Context, w *treeWorker, ops []*journaledOp) (int, error) {
	if len(ops) == 0 {
		return 0, nil
	}
	landed, err := w.landed(ctx, ops[len(ops)-1].change)
	if err != nil || landed {
		return len(ops), err
	}
	missing := sort.Search(len(ops)-1, func(i int) bool {
		if err != nil {
			return true
		}
		landed, err = w.landed(ctx, ops[i].change)
		return !landed
	})
	return missing, err
}

// settle applies op to w's tree: its Change if its Write landed, else the
// operation run again; then the copies its eviction's end left stale are
// forgotten.
func (rp *replayer) settle(ctx context.Context, w *treeWorker, op *journaledOp, landed bool) error {
	var err error
	if landed {
		err = rp.applyOp(w.tree.Tree, op.change)
	} else {
		err = w.tree.Redo(ctx, op.plan, op.change)
	}
	for _, st := range op.stale {
		w.tree.Forget(st.Bucket, st.ID)
	}
	return err
}

// applyOp applies an operation's Change whose Write landed.
func (rp *replayer) applyOp(tr *ringoram.Tree, c ringoram.Change) error {
	if err := tr.ResolveTop(&c); err != nil {
		return err
	}
	if rp.s.opts.TestingKnobs.Leak == leakRecoveryForgetsEvictions {
		c.Evicted = 0
	}
	return tr.Apply(c)
}

// treeOp replays a tree operation as the build before plans journaled it
// (deltaTree), its Write issued again by durable.
func (rp *replayer) treeOp(d *delta.Decoder) {
	t, reads, c := rp.changeHead(d)
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		c.Placed = append(c.Placed, ringoram.Placement{ID: readID(d), Bucket: d.Uvarint()})
	}
	if d.More() {
		c.Top = rp.topBuckets(d)
	}
	if d.Failed() {
		return
	}
	w := rp.s.workers[t]
	delete(rp.plans, t) // the operation committed
	if rp.s.opts.TestingKnobs.Leak == leakRecoveryForgetsEvictions {
		c.Evicted = 0
	}
	if err := w.tree.Apply(c); err != nil {
		d.Check(false, err.Error())
		return
	}
	w.core.reads = reads
	rp.s.stashTaken(c.Taken)
	if c.Evicted > 0 {
		rp.pending[t] = pendingEviction{placed: c.Placed}
	}
}

// changeHead reads what both kinds of a tree operation's record begin
// with (deltaOp, and deltaTree of an earlier build): the tree, its read
// count, and the Change's evictions, bucket versions and blocks taken.
func (rp *replayer) changeHead(d *delta.Decoder) (t int, reads int, c ringoram.Change) {
	t = rp.treeOf(d)
	reads, c.Evicted = int(d.Uvarint()), int(d.Uvarint())
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		c.Buckets = append(c.Buckets, ringoram.BucketVersion{Bucket: d.Uvarint(), Version: d.Uvarint(), Full: d.Bool()})
	}
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		c.Taken = append(c.Taken, tree.Block{ID: readID(d), Value: d.Bytes(rp.s.valueSize)})
	}
	return t, reads, c
}

// topBuckets reads the top buckets a tree's operation changed.
func (rp *replayer) topBuckets(d *delta.Decoder) []ringoram.TopBucket {
	var top []ringoram.TopBucket
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		tb := ringoram.TopBucket{Bucket: d.Uvarint()}
		for m := d.Count(); m > 0 && !d.Failed(); m-- {
			blk := ringoram.Block{Block: tree.Block{ID: readID(d), Value: d.Bytes(rp.s.valueSize)}, Leaf: d.Uvarint()}
			d.Check(blk.Leaf < rp.s.geo.Leaves(), "a top block's leaf outside the tree")
			tb.Blocks = append(tb.Blocks, blk)
		}
		top = append(top, tb)
	}
	return top
}

// stashTaken puts blocks a tree's read took out in their shards' stashes,
// still at their positions until their epochs' records move them (those
// of a read a crash cut short never come): an earlier build's journal,
// whose records of every machine are in one order.
func (s *store) stashTaken(blocks []tree.Block) {
	for _, blk := range blocks {
		if sh := s.stashes[shardOf(blk.ID, len(s.stashes))].core; exists(sh, blk.ID) {
			sh.setStashed(blk.ID, blk.Value)
		}
	}
}

func exists(sh *stashCore, id tree.BlockID) bool {
	ok, _ := sh.has(id)
	return ok
}

func (rp *replayer) plan(d *delta.Decoder) {
	t := rp.treeOf(d)
	var p ringoram.Plan
	d.Read(p.Seed[:])
	p.Evict = int(d.Uvarint())
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		r := ringoram.PathRead{Leaf: d.Uvarint(), Real: d.Bool()}
		if r.Real {
			r.Want = readID(d)
		}
		d.Check(r.Leaf < rp.s.geo.Leaves(), "a plan's path outside the tree")
		p.Reads = append(p.Reads, r)
	}
	if !d.Failed() {
		rp.plans[t] = p
		rp.s.workers[t].tree.Planned(p)
	}
}

// evictDone replays the end of an eviction: the copies it left stale
// (and, in an earlier build's record, withRemoved, the blocks that left
// the stash).
func (rp *replayer) evictDone(d *delta.Decoder, withRemoved bool) {
	t := rp.treeOf(d)
	if withRemoved {
		for n := d.Count(); n > 0 && !d.Failed(); n-- {
			id := readID(d)
			rp.shard(id).unstash(id)
		}
	}
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		st := Stale{ID: readID(d), Bucket: d.Uvarint()}
		if ops := rp.ops[t]; len(ops) > 0 {
			ops[len(ops)-1].stale = append(ops[len(ops)-1].stale, st)
		} else {
			rp.s.workers[t].tree.Forget(st.Bucket, st.ID)
		}
	}
	delete(rp.pending, t)
}

// finishEarlier settles the evictions whose end an earlier build's
// journal lacks (the crash came between an eviction's Write and its
// end): a placed copy whose block is still stashed, or gone, is stale;
// one whose block left the stash is the block.
func (rp *replayer) finishEarlier() {
	for t, p := range rp.pending {
		for _, pl := range p.placed {
			if exists, stashed := rp.shard(pl.ID).has(pl.ID); stashed || !exists {
				rp.s.workers[t].tree.Forget(pl.Bucket, pl.ID)
			}
		}
	}
	rp.pending = map[int]pendingEviction{}
}

// endEvictions ends the evictions whose end a tree's log lacks (the
// crash came between an eviction's Write and its end): each Stash shard
// gets again the message that reported the eviction's placements, with
// its id, and answers it as it did before the crash (its msgTable, from
// its own log) or, if it never did, now (a copy placed whose block is
// still stashed, or gone, is stale: Treebeard Sec. 5.2.2). The tree
// forgets the copies the shards report stale.
func (rp *replayer) endEvictions() error {
	for t, p := range rp.pending {
		for i, sh := range rp.s.stashes {
			m := EvictionDoneMsg{ID: p.msg}
			for _, pl := range p.placed {
				if shardOf(pl.ID, len(rp.s.stashes)) == i {
					m.Blocks = append(m.Blocks, ringoram.Block{Block: tree.Block{ID: pl.ID}, Leaf: pl.Leaf})
					m.Placed = append(m.Placed, int64(pl.Bucket))
				}
			}
			rep := sh.EvictionDone(m)
			if err := rep.Err(); err != nil {
				return fmt.Errorf("treebeard: tree %d: the end of an eviction a crash cut short, to Stash shard %d: %w", t, i, err)
			}
			for _, st := range rep.Stale {
				rp.s.workers[t].tree.Forget(st.Bucket, st.ID)
			}
		}
	}
	rp.pending = map[int]pendingEviction{}
	return nil
}

// readID reads a block ID.
func readID(d *delta.Decoder) (id tree.BlockID) {
	d.Read(id[:])
	return id
}
