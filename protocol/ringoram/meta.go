package ringoram

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// meta is the metadata of one bucket (Ring ORAM's bucket metadata,
// Treebeard Sec. 2 Step 2): which slots hold which real blocks and which
// slots were read since the bucket was last shuffled. It is stored sealed
// at Layout.MetaAddr, bound to that address.
type meta struct {
	Version     uint64  // incremented by every write of the metadata
	SlotVersion uint64  // the version the slots were sealed with; new at every full rewrite
	Count       int     // reads since the last shuffle
	Valid       uint64  // bit i set: slot i not read since the last shuffle
	Entries     []entry // the Z real entries
}

// entry is one real block of a bucket: its slot, identifier and the leaf
// it is mapped to (as Ring ORAM's metadata holds it, so an eviction can
// move the block deeper along its path).
type entry struct {
	Present bool
	Slot    uint8
	ID      tree.BlockID
	Leaf    uint64
}

// The plaintext has a fixed size for a given Z: Version, SlotVersion
// (8 bytes each, big-endian), Count (4), Valid (8), then per entry Present
// (1), Slot (1), the ID and the Leaf (8).
const (
	metaHeader = 8 + 8 + 4 + 8
	idSize     = len(tree.BlockID{})
	entrySize  = 1 + 1 + idSize + 8
)

func metaPlainSize(z int) int { return metaHeader + z*entrySize }

// allSlots returns the mask of n slots.
func allSlots(n int) uint64 { return ^uint64(0) >> (64 - n) }

func (m *meta) appendPlain(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, m.Version)
	dst = binary.BigEndian.AppendUint64(dst, m.SlotVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.Count))
	dst = binary.BigEndian.AppendUint64(dst, m.Valid)
	for _, e := range m.Entries {
		var present byte
		if e.Present {
			present = 1
		}
		dst = append(dst, present, e.Slot)
		dst = append(dst, e.ID[:]...)
		dst = binary.BigEndian.AppendUint64(dst, e.Leaf)
	}
	return dst
}

// parse fills m (whose Entries has room for p.Z entries) from plain, and
// checks that it is metadata a Tree with params p can have written for
// bucket of a tree of geometry g: at most S-Z reads (a bucket read more
// is reshuffled before it is written), one invalid slot per read, real
// entries in distinct valid slots, each mapped to a leaf whose path
// crosses bucket. Anything else wraps seal.ErrTampered.
func (m *meta) parse(plain []byte, p Params, g tree.Geometry, bucket uint64) error {
	if len(plain) != metaPlainSize(p.Z) {
		return fmt.Errorf("%w: metadata is %d bytes, want %d", seal.ErrTampered, len(plain), metaPlainSize(p.Z))
	}
	m.Version = binary.BigEndian.Uint64(plain)
	m.SlotVersion = binary.BigEndian.Uint64(plain[8:])
	count := binary.BigEndian.Uint32(plain[16:])
	m.Valid = binary.BigEndian.Uint64(plain[20:])
	n := p.slots()
	if int64(count) > int64(p.S-p.Z) || m.Valid&^allSlots(n) != 0 || bits.OnesCount64(m.Valid)+int(count) != n {
		return fmt.Errorf("%w: metadata with count %d and valid slots %b", seal.ErrTampered, count, m.Valid)
	}
	m.Count = int(count)
	var used uint64
	for i := range m.Entries {
		b := plain[metaHeader+i*entrySize : metaHeader+(i+1)*entrySize]
		e := entry{Present: b[0] == 1, Slot: b[1], ID: tree.BlockID(b[2 : 2+idSize]), Leaf: binary.BigEndian.Uint64(b[2+idSize:])}
		if b[0] > 1 || e.Present && (int(e.Slot) >= n || m.Valid&^used&(1<<e.Slot) == 0 || !g.OnPath(bucket, e.Leaf)) {
			return fmt.Errorf("%w: metadata entry %d in slot %d is inconsistent", seal.ErrTampered, i, e.Slot)
		}
		if e.Present {
			used |= 1 << e.Slot
		}
		m.Entries[i] = e
	}
	return nil
}

// realMask returns the slots of the bucket's real entries (stale or not).
func (m *meta) realMask() uint64 {
	var mask uint64
	for _, e := range m.Entries {
		if e.Present {
			mask |= 1 << e.Slot
		}
	}
	return mask
}

// entryAt returns the real entry in slot, or nil.
func (m *meta) entryAt(slot uint8) *entry {
	for i := range m.Entries {
		if e := &m.Entries[i]; e.Present && e.Slot == slot {
			return e
		}
	}
	return nil
}

// consume records a read of slot (Ring ORAM's single access invariant,
// Sec. 2): the slot is invalidated, the count grows, and a real block read
// leaves the bucket.
func (m *meta) consume(slot uint8) {
	if e := m.entryAt(slot); e != nil {
		*e = entry{}
	}
	m.Valid &^= 1 << slot
	m.Count++
}

// clone returns a copy of m sharing no memory with it.
func (m meta) clone() meta {
	m.Entries = slices.Clone(m.Entries)
	return m
}

// randomBit returns a uniformly random set bit of mask, which must not be
// zero.
func randomBit(r *rand.Rand, mask uint64) uint8 {
	for n := r.IntN(bits.OnesCount64(mask)); n > 0; n-- {
		mask &= mask - 1
	}
	return uint8(bits.TrailingZeros64(mask))
}

// newMetas returns n metadata records with room for Z entries each.
func (t *Tree) newMetas(n int) []meta {
	metas := make([]meta, n)
	entries := make([]entry, n*t.p.Z)
	for i := range metas {
		metas[i].Entries = entries[i*t.p.Z : (i+1)*t.p.Z : (i+1)*t.p.Z]
	}
	return metas
}

// copyMetas returns a copy of metas that shares no entries with them.
func (t *Tree) copyMetas(metas []meta) []meta {
	out := t.newMetas(len(metas))
	for i, m := range metas {
		entries := out[i].Entries
		copy(entries, m.Entries)
		out[i] = m
		out[i].Entries = entries
	}
	return out
}
