package ringoram

import (
	"context"
	"math/bits"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// PathRead is one request of a multi-path read: the path to Leaf, and,
// for a real read, the block wanted from it (a fake read, Real false,
// reads the path all the same). It holds no pointer, so it can cross a
// network.
type PathRead struct {
	Leaf uint64
	Want tree.BlockID
	Real bool
}

// ReadResult is the answer to one PathRead.
type ReadResult struct {
	Block tree.Block
	Found bool
}

// ReadPaths is a multi-path read (Treebeard Sec. 5.3.1): the union U of
// the requests' paths below the top levels held in memory (topCache) is
// read with every shared bucket read once, in these backend calls and no
// others (a wanted block a top bucket holds is taken from it first):
//
//  1. ONE Read of the metadata of the buckets of U the Tree has no copy
//     of (metaCache), none when it has them all.
//  2. ONE Read of min(c, Z) slots of each bucket of U, c being the number
//     of requests whose path crosses it (Ring ORAM's ReadPath, Sec. 2
//     Step 2, which reads one slot per path): the slots of blocks
//     requests want where the bucket lists them, the rest uniformly
//     random valid dummy slots. With Z = 1, the paper's setting, that is
//     one slot per bucket; with Z > 1 it is Treebeard's first approach of
//     Sec. 5.3.1 capped at Z, since a bucket holds at most Z wanted
//     blocks. How many slots a bucket gives depends only on the leaves.
//     The slots are invalidated and the bucket's count grows; a wanted
//     block leaves the bucket and goes to its request.
//     In the same Read, after those: exactly Z slots of each bucket that
//     then has fewer than Z valid dummies left (after S reads, with
//     Z = 1), for its early reshuffle (Sec. 2). Which buckets those are
//     follows from the counts before any I/O, so the reshuffle costs no
//     round trip of its own, where the paper reads it separately.
//  3. ONE atomic Write of the new metadata of every bucket of U and, for
//     reshuffled buckets, all their slots in a fresh permutation.
//
// Results are in request order. Found is false when the wanted block is
// not on its request's path (the caller decides whether that is
// tampering), and for every request but the first that wants a given
// block. The expected versions advance only once the Write succeeded; on
// any error the Tree's state is unchanged (with Config.WriteAhead, once
// the hook has returned the read is committed, and a failed Write is
// issued again before the next operation).
func (d *Driver) ReadPaths(ctx context.Context, reqs []PathRead) ([]ReadResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	results, _, err := d.ReadEvict(ctx, reqs, 0, nil)
	return results, err
}

// pathSlots chooses the slots a path read fetches from each bucket of
// union (Sec. 2 Step 2, Sec. 5.3.1): min(c, Z) of bucket i, c being the
// number of requests whose path crosses it; first the slot of each block
// a request wants where the bucket lists one, then uniformly random valid
// dummy slots (valid, and no real entry, stale or not), each bucket's in
// ascending slot order so the order tells nothing. owner[j] is the
// request read j serves, or -1.
func (t *Tree) pathSlots(reqs []PathRead, union []uint64, metas []meta) ([]slotRead, []int32) {
	claimed := map[tree.BlockID]bool{}
	crossing := make([]int, len(union))
	for _, req := range reqs {
		for lvl := t.top.levels; lvl <= t.g.L; lvl++ {
			crossing[index(union, t.g.BucketAt(req.Leaf, lvl))]++
		}
	}
	wanted := make([][]slotOwner, len(union))
	for r, req := range reqs {
		if !req.Real || claimed[req.Want] {
			continue
		}
		if i, slot := t.locate(union, metas, req.Leaf, req.Want); i >= 0 {
			claimed[req.Want] = true
			wanted[i] = append(wanted[i], slotOwner{slot: slot, owner: int32(r)})
		}
	}
	var reads []slotRead
	var owner []int32
	for i := range union {
		m, w := &metas[i], wanted[i]
		var taken uint64
		for _, so := range w {
			taken |= 1 << so.slot
		}
		for n := len(w); n < min(crossing[i], t.p.Z); n++ {
			dummies := m.Valid &^ m.realMask() &^ taken
			d := randomBit(t.rng, dummies)
			if t.leak == leakDummiesInOrder {
				d = uint8(bits.TrailingZeros64(dummies))
			}
			taken |= 1 << d
		}
		for ; taken != 0; taken &= taken - 1 {
			slot := uint8(bits.TrailingZeros64(taken))
			o := int32(-1)
			for _, so := range w {
				if so.slot == slot {
					o = so.owner
				}
			}
			reads, owner = append(reads, slotRead{I: int32(i), Slot: slot}), append(owner, o)
		}
	}
	return reads, owner
}

// slotOwner is the slot of a wanted block and the request that wants it.
type slotOwner struct {
	slot  uint8
	owner int32
}

// locate returns the bucket of union on the path to leaf listing id as a
// live real block, and its slot; -1 when there is none.
func (t *Tree) locate(union []uint64, metas []meta, leaf uint64, id tree.BlockID) (int, uint8) {
	for lvl := t.top.levels; lvl <= t.g.L; lvl++ {
		b := t.g.BucketAt(leaf, lvl)
		i := index(union, b)
		for _, e := range metas[i].Entries {
			if e.ID == id && t.live(b, e) {
				return i, e.Slot
			}
		}
	}
	return -1, 0
}

// due returns the buckets (indices into the union) an early reshuffle
// (Ring ORAM, Sec. 2) rewrites once a path read has consumed its slots:
// those with fewer than Z valid dummies left (read more than S-Z times
// since their last shuffle; S times with Z = 1), so the next read can take
// Z from each.
func (t *Tree) due(metas []meta) []int {
	var due []int
	for i := range metas {
		if metas[i].Count > t.p.S-t.p.Z {
			due = append(due, i)
		}
	}
	return due
}

// reshuffle plans the writes of a path read: new metadata for every
// bucket of union, and the buckets due laid out afresh with the live real
// blocks kept[j] read from due[j].
func (t *Tree) reshuffle(union []uint64, metas []meta, due []int, kept [][]Block) []bucketWrite {
	t.nextVersions(union, metas)
	ws := make([]bucketWrite, len(union))
	for i, b := range union {
		ws[i] = bucketWrite{bucket: b, meta: &metas[i]}
	}
	n := t.p.slots()
	slots := make([]*tree.Block, len(due)*n)
	for j, i := range due {
		ws[i] = t.rewrite(union[i], &metas[i], kept[j], slots[j*n:(j+1)*n])
	}
	return ws
}
