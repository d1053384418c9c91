package treebeard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The journal's records (internal/durable) carry one of these deltas of
// the trusted layers' state. A tree's record (deltaOp) holds no sealed
// item: recovery tells which of each tree's operations since the
// checkpoint landed and runs the others again (settleOps).
const (
	deltaBlocks    byte = iota + 1 // a Stash shard's epoch: where its blocks are now, and the stashed ones' values
	deltaTree                      // a tree's multi-path read or eviction as the previous build journaled it: its ringoram.Change with the top buckets' values, the tree's read count, and the sealed items of its Write, which recovery issues again
	deltaEvictDone                 // an eviction's end: the blocks that left the stash, the copies it left stale
	deltaLoad                      // a bulk load begins: the trees are rewritten whole
	deltaPlan                      // a tree's multi-path read or eviction is about to read: its ringoram.Plan
	deltaOp                        // a tree's multi-path read or eviction: its ringoram.Change (top buckets as block IDs), and the tree's read count
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
		if st, ok := s.stash[id]; ok {
			b = delta.AppendBytes(append(b, 1), st.value)
		} else {
			b = append(b, 0)
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

// evictDoneDelta describes the end of an eviction of tree t: the blocks
// that left the stash, and the copies it placed that are stale.
func evictDoneDelta(t int, removed []tree.BlockID, stale []Stale) []byte {
	b := binary.AppendUvarint([]byte{deltaEvictDone}, uint64(t))
	b = binary.AppendUvarint(b, uint64(len(removed)))
	for _, id := range removed {
		b = append(b, id[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(stale)))
	for _, st := range stale {
		b = binary.AppendUvarint(append(b, st.ID[:]...), st.Bucket)
	}
	return b
}

var errMalformed = errors.New("treebeard: malformed journal record")

// replayer applies journal records to the layers' state, in order, as the
// operations that wrote them did.
type replayer struct {
	s *store
	// pending holds, per tree, the placements of an eviction whose end is
	// not in the journal.
	pending map[int][]ringoram.Placement
	// plans holds, per tree, the plan of an operation that read and never
	// committed: a crash cut it short.
	plans map[int]ringoram.Plan
	// ops holds, per tree, its operations journaled, not yet applied to
	// the tree: their Writes may not have reached storage (settleOps).
	ops  map[int][]*journaledOp
	load bool // a bulk load began and never checkpointed
}

// journaledOp is a tree's operation as its records have it: its plan, its
// Change, and the copies the end of its eviction left stale, forgotten
// once the Change is applied.
type journaledOp struct {
	plan   ringoram.Plan
	change ringoram.Change
	stale  []Stale
}

func (rp *replayer) apply(rec []byte) error {
	d := delta.NewDecoder(rec)
	switch kind := d.Byte(); kind {
	case deltaBlocks:
		rp.blocks(d)
	case deltaTree:
		rp.tree(d)
	case deltaEvictDone:
		rp.evictDone(d)
	case deltaLoad:
		rp.load = true
	case deltaPlan:
		rp.plan(d)
	case deltaOp:
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

func (rp *replayer) blocks(d *delta.Decoder) {
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		id := readID(d)
		sh := rp.shard(id)
		if !d.Bool() {
			sh.forget(id)
			continue
		}
		t, leaf := d.Uvarint(), d.Uvarint()
		d.Check(t < uint64(len(rp.s.workers)) && leaf < rp.s.geo.Leaves(), "a position outside the trees")
		inStash, value := d.Bool(), []byte(nil)
		if inStash {
			value = d.Bytes(rp.s.valueSize)
		}
		if d.Failed() {
			return
		}
		sh.setPosition(id, Position{Tree: int(t), Leaf: leaf})
		if inStash {
			sh.setStashed(id, value)
		} else {
			sh.unstash(id)
		}
	}
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
	p, planned := rp.plans[int(t)]
	d.Check(planned, "an operation whose plan is not in the journal")
	if d.Failed() {
		return
	}
	delete(rp.plans, int(t)) // the operation committed
	rp.ops[int(t)] = append(rp.ops[int(t)], &journaledOp{plan: p, change: c})
	rp.s.workers[t].core.reads = reads
	rp.s.stashTaken(c.Taken)
	if c.Evicted > 0 {
		rp.pending[int(t)] = c.Placed
		rp.s.workers[t].core.nextEviction() // the number its messages carried
	}
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

func (rp *replayer) tree(d *delta.Decoder) {
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
	delete(rp.plans, int(t)) // the operation committed
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
		rp.pending[int(t)] = c.Placed
	}
}

// changeHead reads what both kinds of a tree operation's record begin
// with (deltaOp, and deltaTree of the previous build): the tree, its read
// count, and the Change's evictions, bucket versions and blocks taken.
func (rp *replayer) changeHead(d *delta.Decoder) (t uint64, reads int, c ringoram.Change) {
	t, reads, c.Evicted = d.Uvarint(), int(d.Uvarint()), int(d.Uvarint())
	d.Check(t < uint64(len(rp.s.workers)), "a tree that does not exist")
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
// of a read a crash cut short never come).
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
	t := d.Uvarint()
	d.Check(t < uint64(len(rp.s.workers)), "a tree that does not exist")
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
		rp.plans[int(t)] = p
		rp.s.workers[t].tree.Planned(p)
	}
}

func (rp *replayer) evictDone(d *delta.Decoder) {
	t := d.Uvarint()
	d.Check(t < uint64(len(rp.s.workers)), "a tree that does not exist")
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		id := readID(d)
		rp.shard(id).unstash(id)
	}
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		st := Stale{ID: readID(d), Bucket: d.Uvarint()}
		if ops := rp.ops[int(t)]; len(ops) > 0 {
			ops[len(ops)-1].stale = append(ops[len(ops)-1].stale, st)
		} else {
			rp.s.workers[t].tree.Forget(st.Bucket, st.ID)
		}
	}
	delete(rp.pending, int(t))
}

// finish settles the evictions whose end the journal lacks (the crash
// came between an eviction's Write and its end): a placed copy whose block
// is still stashed, or gone, is stale; one whose block left the stash is
// the block.
func (rp *replayer) finish() {
	for t, placed := range rp.pending {
		for _, p := range placed {
			if exists, stashed := rp.shard(p.ID).has(p.ID); stashed || !exists {
				rp.s.workers[t].tree.Forget(p.Bucket, p.ID)
			}
		}
	}
	rp.pending = map[int][]ringoram.Placement{}
}

// readID reads a block ID.
func readID(d *delta.Decoder) (id tree.BlockID) {
	d.Read(id[:])
	return id
}
