package ringoram

import (
	"math/bits"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// slotRead is one slot to read: slot Slot of bucket union[I].
type slotRead struct {
	I    int32
	Slot uint8
}

// bucketWrite is one bucket of a Write as a rewrite plans it: its new
// metadata and, for a full rewrite, the block of each of its Z+S slots
// (nil for a dummy).
type bucketWrite struct {
	bucket uint64
	meta   *meta
	slots  []*tree.Block // nil: metadata only
}

// realSlots appends to dst the Z slots Ring ORAM's ReadBucket reads from
// bucket union[i] before rewriting it (an eviction or an early reshuffle,
// Sec. 2): the slots of its live real blocks, padded with uniformly random
// other valid slots, in ascending slot order so that the order tells
// nothing. A bucket is reshuffled once more than S-Z of its slots were
// read, so it always has at least Z valid slots.
func (t *Tree) realSlots(dst []slotRead, bucket uint64, m *meta, i int32) []slotRead {
	var taken uint64
	n := 0
	for _, e := range m.Entries {
		if t.live(bucket, e) {
			taken |= 1 << e.Slot
			n++
		}
	}
	for ; n < t.p.Z; n++ {
		taken |= 1 << randomBit(t.rng, m.Valid&^taken)
	}
	for ; taken != 0; taken &= taken - 1 {
		dst = append(dst, slotRead{I: i, Slot: uint8(bits.TrailingZeros64(taken))})
	}
	return dst
}

// realSlotsOf returns the Z slots of each bucket union[i], i in idx, that
// ReadBucket reads (realSlots).
func (t *Tree) realSlotsOf(union []uint64, metas []meta, idx []int) []slotRead {
	reads := make([]slotRead, 0, len(idx)*t.p.Z)
	for _, i := range idx {
		reads = t.realSlots(reads, union[i], &metas[i], int32(i))
	}
	return reads
}

// keptBlocks returns, for each bucket union[i], i in idx, the live real
// blocks among blocks, read from reads (Z per bucket, realSlotsOf), with
// their leaves, each with room for Z.
func (t *Tree) keptBlocks(union []uint64, metas []meta, idx []int, reads []slotRead, blocks []tree.Block) [][]Block {
	out, z := make([][]Block, len(idx)), t.p.Z
	all := make([]Block, len(idx)*z)
	for j, i := range idx {
		kept := all[j*z : j*z : (j+1)*z]
		for x := j * z; x < (j+1)*z; x++ {
			if e := metas[i].entryAt(reads[x].Slot); e != nil && t.live(union[i], *e) {
				kept = append(kept, Block{Block: blocks[x], Leaf: e.Leaf})
			}
		}
		out[j] = kept
	}
	return out
}

// rewrite returns the full rewrite of bucket (Ring ORAM's permuted
// buckets invariant, Sec. 2): reals (at most Z) go to distinct uniformly
// random slots, every other slot holds a dummy, all slots are valid and
// the count restarts at 0. m.Version must already be the new version; it
// becomes the SlotVersion too, so slots of any earlier layout fail to
// open. slots (Z+S, zeroed) receives the block of each slot, nil for a
// dummy.
func (t *Tree) rewrite(bucket uint64, m *meta, reals []Block, slots []*tree.Block) bucketWrite {
	m.SlotVersion, m.Count, m.Valid = m.Version, 0, allSlots(t.p.slots())
	free := m.Valid
	for e := range m.Entries {
		if e >= len(reals) {
			m.Entries[e] = entry{}
			continue
		}
		s := randomBit(t.rng, free)
		if t.leak == leakRealsInFirstSlots {
			s = uint8(bits.TrailingZeros64(free))
		}
		free &^= 1 << s
		slots[s] = &reals[e].Block
		m.Entries[e] = entry{Present: true, Slot: s, ID: reals[e].Block.ID, Leaf: reals[e].Leaf}
	}
	return bucketWrite{bucket: bucket, meta: m, slots: slots}
}

// nextVersions sets the version each bucket of union will be written
// with.
func (t *Tree) nextVersions(union []uint64, metas []meta) {
	for i, b := range union {
		metas[i].Version = t.versions[b] + 1
	}
}

// index returns the position of bucket in union (sorted ascending, as
// tree.Geometry.Union returns it), or -1.
func index(union []uint64, bucket uint64) int {
	if i, ok := slices.BinarySearch(union, bucket); ok {
		return i
	}
	return -1
}
