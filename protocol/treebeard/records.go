package treebeard

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The journal's records (internal/durable) carry one of these deltas of
// the trusted layers' state; a tree's record also carries the sealed items
// of its Write, which recovery issues again.
const (
	deltaBlocks    byte = iota + 1 // a Stash shard's epoch: where its blocks are now, and the stashed ones' values
	deltaTree                      // a tree's multi-path read or eviction: its ringoram.Change, and the tree's read count
	deltaEvictDone                 // an eviction's end: the blocks that left the stash, the copies it left stale
	deltaLoad                      // a bulk load begins: the trees are rewritten whole
)

// blockState is where a block is, as an epoch's record holds it.
type blockState struct {
	ID      tree.BlockID
	Exists  bool
	Pos     position
	Stashed bool
	Value   []byte
}

// blocksDelta describes the blocks an epoch touched, as they are now;
// s.mu is held.
func (s *Stash) blocksDelta(ids []tree.BlockID) []byte {
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
			b = appendBytes(append(b, 1), st.value)
		} else {
			b = append(b, 0)
		}
	}
	return b
}

// treeDelta describes an operation of tree t: its Change, and the tree's
// path reads since its last eviction once the operation is done.
func treeDelta(t, reads int, c ringoram.Change) []byte {
	b := binary.AppendUvarint([]byte{deltaTree}, uint64(t))
	b = binary.AppendUvarint(b, uint64(reads))
	b = binary.AppendUvarint(b, uint64(c.Evicted))
	b = binary.AppendUvarint(b, uint64(len(c.Buckets)))
	for _, bv := range c.Buckets {
		full := byte(0)
		if bv.Full {
			full = 1
		}
		b = append(binary.AppendUvarint(binary.AppendUvarint(b, bv.Bucket), bv.Version), full)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Taken)))
	for _, blk := range c.Taken {
		b = appendBytes(append(b, blk.ID[:]...), blk.Value)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Placed)))
	for _, p := range c.Placed {
		b = binary.AppendUvarint(append(b, p.ID[:]...), p.Bucket)
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

func appendBytes(b, v []byte) []byte { return append(binary.AppendUvarint(b, uint64(len(v))), v...) }

var errMalformed = errors.New("malformed journal record")

// replayer applies journal records to the layers' state, in order, as the
// operations that wrote them did.
type replayer struct {
	s *store
	// pending holds, per tree, the placements of an eviction whose end is
	// not in the journal.
	pending map[int][]ringoram.Placement
	load    bool // a bulk load began and never checkpointed
}

func (rp *replayer) apply(delta []byte) error {
	r := reader{b: delta}
	switch r.byte() {
	case deltaBlocks:
		rp.blocks(&r)
	case deltaTree:
		rp.tree(&r)
	case deltaEvictDone:
		rp.evictDone(&r)
	case deltaLoad:
		rp.load = true
	default:
		r.err = errMalformed
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errMalformed
	}
	return r.err
}

// shard returns the Stash shard of block id.
func (rp *replayer) shard(id tree.BlockID) *Stash {
	return rp.s.stashes[shardOf(id, len(rp.s.stashes))]
}

func (rp *replayer) blocks(r *reader) {
	for n := r.count(); n > 0 && r.err == nil; n-- {
		id := r.id()
		sh := rp.shard(id)
		if r.byte() == 0 {
			delete(sh.pos, id)
			delete(sh.stash, id)
			continue
		}
		p := position{Tree: int(r.uvarint()), Leaf: r.uvarint()}
		if p.Tree >= len(rp.s.workers) || p.Leaf >= rp.s.geo.Leaves() {
			r.err = fmt.Errorf("%w: a position outside the trees", errMalformed)
			return
		}
		sh.pos[id] = p
		if r.byte() == 1 {
			sh.stash[id] = &stashed{value: r.bytes(), evicting: -1}
		} else {
			delete(sh.stash, id)
		}
	}
}

func (rp *replayer) tree(r *reader) {
	t, reads, evicted := int(r.uvarint()), int(r.uvarint()), int(r.uvarint())
	if r.err != nil || t >= len(rp.s.workers) {
		r.err = errMalformed
		return
	}
	c := ringoram.Change{Evicted: evicted}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		c.Buckets = append(c.Buckets, ringoram.BucketVersion{Bucket: r.uvarint(), Version: r.uvarint(), Full: r.byte() == 1})
	}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		c.Taken = append(c.Taken, tree.Block{ID: r.id(), Value: r.bytes()})
	}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		c.Placed = append(c.Placed, ringoram.Placement{ID: r.id(), Bucket: r.uvarint()})
	}
	if r.err != nil {
		return
	}
	w := rp.s.workers[t]
	if rp.s.opts.leak == leakRecoveryForgetsEvictions {
		c.Evicted = 0
	}
	if r.err = w.tree.Apply(c); r.err != nil {
		return
	}
	w.reads = reads
	// A block a read took out of the tree is in its shard's stash from
	// now on, still at its position until its epoch's record moves it.
	for _, blk := range c.Taken {
		if sh := rp.shard(blk.ID); hasPos(sh, blk.ID) {
			sh.stash[blk.ID] = &stashed{value: blk.Value, evicting: -1}
		}
	}
	if c.Evicted > 0 {
		rp.pending[t] = c.Placed
	}
}

func hasPos(sh *Stash, id tree.BlockID) bool {
	_, ok := sh.pos[id]
	return ok
}

func (rp *replayer) evictDone(r *reader) {
	t := int(r.uvarint())
	if r.err != nil || t >= len(rp.s.workers) {
		r.err = errMalformed
		return
	}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		id := r.id()
		delete(rp.shard(id).stash, id)
	}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		id := r.id()
		rp.s.workers[t].tree.Forget(r.uvarint(), id)
	}
	delete(rp.pending, t)
}

// finish settles the evictions whose end the journal lacks (the crash
// came between an eviction's Write and its end): a placed copy whose block
// is still stashed, or gone, is stale; one whose block left the stash is
// the block.
func (rp *replayer) finish() {
	for t, placed := range rp.pending {
		for _, p := range placed {
			sh := rp.shard(p.ID)
			if _, stashed := sh.stash[p.ID]; stashed || !hasPos(sh, p.ID) {
				rp.s.workers[t].tree.Forget(p.Bucket, p.ID)
			}
		}
	}
	rp.pending = map[int][]ringoram.Placement{}
}

// reader reads a delta, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.err = errMalformed
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items of at least one byte each.
func (r *reader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errMalformed
		return 0
	}
	return int(n)
}

func (r *reader) id() tree.BlockID {
	var id tree.BlockID
	if len(r.b) < len(id) {
		r.err = errMalformed
		return id
	}
	r.b = r.b[copy(id[:], r.b):]
	return id
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errMalformed
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}
