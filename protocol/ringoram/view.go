package ringoram

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
)

// OpKind is what an operation of a tree is, told from its shape on
// storage alone.
type OpKind int

// The operations of a tree.
const (
	OpPathRead OpKind = iota // a multi-path read (Treebeard Sec. 5.3.1)
	OpEviction               // an eviction of k paths or a multiple (Ring ORAM's EvictPath)
)

func (k OpKind) String() string { return [...]string{"multi-path read", "eviction"}[k] }

// SlotRef is one slot of a bucket.
type SlotRef struct {
	Bucket uint64
	Slot   int
}

// Op is one operation of a tree as storage saw it: the Reads of a
// multi-path read or an eviction and the Write that ends it. A multi-path
// read is a Read of up to Z slots per bucket (one per path crossing it),
// followed in the same Read by Z slots of each bucket an early reshuffle
// rewrites, and a Write of the metadata (plus the reshuffled buckets'
// slots); an eviction is a Read of Z slots per bucket and a Write of
// every slot of every bucket. A multi-path read may evict too, in the
// same round trip (Driver.ReadEvict): its slot Read is followed by
// the eviction's, and its Write holds both. Any may start with a Read of
// the metadata the tree has no copy of (none after a load, which writes
// them all; after a recovery, each bucket's the first time a union holds
// it).
type Op struct {
	Seq        uint64 // Tap sequence number of its first call
	Kind       OpKind
	Meta       []uint64          // buckets whose metadata a first Read fetched, in order (often none)
	Union      []uint64          // the buckets of its first slot Read, sorted: the union of its paths
	SlotReads  [][]SlotRef       // the first slot Read: one part, or two (reshuffle)
	EvictUnion []uint64          // a multi-path read that evicts: the buckets of the eviction's Read, sorted
	EvictReads []SlotRef         // and that Read
	WroteMeta  []uint64          // buckets whose metadata the Write holds, in order
	WroteSlots map[uint64]uint64 // bucket -> mask of the slots the Write holds
}

// Eviction returns the union of the paths op evicts, and whether it
// evicts: an eviction's, or that of a multi-path read that evicts too.
func (op Op) Eviction() ([]uint64, bool) {
	if op.Kind == OpEviction {
		return op.Union, true
	}
	return op.EvictUnion, len(op.EvictUnion) > 0
}

// View returns the operations of one tree laid out by l, with z real
// blocks per bucket, as storage saw them: records, its calls only,
// grouped into operations (Reads, then the Write that ends them), each
// parsed. It is what an audit of a protocol built on trees parses
// storage's view with.
func View(records []observe.Record, l Layout, z int) ([]Op, error) {
	var ops []Op
	var reads []observe.Record
	for _, r := range records {
		switch r.Op {
		case observe.OpRead:
			reads = append(reads, r)
		case observe.OpWrite:
			v, err := parseOp(reads, r, l, z)
			if err != nil {
				return nil, err
			}
			ops = append(ops, v)
			reads = nil
		default:
			return nil, fmt.Errorf("call %d: a tree's %v", r.Seq, r.Op)
		}
	}
	if len(reads) > 0 {
		return nil, fmt.Errorf("call %d: Reads with no Write after them", reads[0].Seq)
	}
	return ops, nil
}

// splitShuffle splits an operation's slot Read into the path read's slots
// and, after them, the Z slots of each bucket an early reshuffle rewrites
// (a bucket with more than Z slots in the Read: one path crossing it takes
// at least one). An eviction's Read, Z slots of each bucket, has no second
// part.
func splitShuffle(read []SlotRef, z int) (path, shuffle []SlotRef) {
	n := 0
	for _, c := range slotsPerBucket(read) {
		if c > z {
			c -= z
		}
		n += c
	}
	return read[:n], read[n:]
}

// parseOp parses the Reads of one operation and the Write that ends it.
func parseOp(reads []observe.Record, write observe.Record, l Layout, z int) (Op, error) {
	v := Op{Seq: write.Seq, WroteSlots: map[uint64]uint64{}}
	if len(reads) > 0 {
		v.Seq = reads[0].Seq
		if _, ok := l.ParseMeta(reads[0].Addrs[0]); ok { // the metadata the tree has no copy of
			for _, a := range reads[0].Addrs {
				b, ok := l.ParseMeta(a)
				if !ok {
					return v, fmt.Errorf("call %d: a metadata Read holds %q", reads[0].Seq, a)
				}
				v.Meta = append(v.Meta, b)
			}
			reads = reads[1:]
		}
	}
	if len(reads) != 1 && len(reads) != 2 {
		return v, fmt.Errorf("call %d: an operation of %d slot Reads and a Write", write.Seq, len(reads))
	}
	read, err := slotRefs(reads[0], l)
	if err != nil {
		return v, err
	}
	if len(reads) == 2 { // a multi-path read that evicts
		if v.EvictReads, err = slotRefs(reads[1], l); err != nil {
			return v, err
		}
		v.EvictUnion = bucketsOf(v.EvictReads)
	}
	path, shuffle := splitShuffle(read, z)
	v.SlotReads = append(v.SlotReads, path)
	if len(shuffle) > 0 {
		v.SlotReads = append(v.SlotReads, shuffle)
	}
	if err := parseWrite(&v, write, l); err != nil {
		return v, err
	}
	v.Union = bucketsOf(v.SlotReads[0])
	if len(reads) == 1 && len(v.SlotReads) == 1 && len(v.WroteSlots) > 0 &&
		(zEach(read, z) || rewritesAll(v.WroteSlots, v.Union)) {
		v.Kind = OpEviction // slots written, no bucket read more than Z times, and an eviction's shape
	}
	return v, nil
}

// zEach reports whether a Read takes exactly z slots of each of its
// buckets, as an eviction's does; a multi-path read takes one slot per
// path crossing a bucket, fewer than z of most (with z = 1 the two look
// alike, and rewritesAll tells them apart).
func zEach(read []SlotRef, z int) bool {
	for _, n := range slotsPerBucket(read) {
		if n != z {
			return false
		}
	}
	return true
}

// slotsPerBucket counts a Read's slots by bucket.
func slotsPerBucket(read []SlotRef) map[uint64]int {
	per := map[uint64]int{}
	for _, r := range read {
		per[r.Bucket]++
	}
	return per
}

// rewritesAll reports whether a Write's slots cover every bucket of union,
// and no other: an eviction's. A multi-path read rewrites only the buckets
// it reshuffles.
func rewritesAll(wrote map[uint64]uint64, union []uint64) bool {
	if len(wrote) != len(union) {
		return false
	}
	for _, b := range union {
		if _, ok := wrote[b]; !ok {
			return false
		}
	}
	return true
}

// slotRefs returns the slots a Read holds.
func slotRefs(r observe.Record, l Layout) ([]SlotRef, error) {
	var out []SlotRef
	for _, a := range r.Addrs {
		b, s, ok := l.ParseSlot(a)
		if !ok {
			return nil, fmt.Errorf("call %d: Read holds %q, not a slot", r.Seq, a)
		}
		out = append(out, SlotRef{b, s})
	}
	return out, nil
}

// bucketsOf returns the buckets of slots, sorted, each once.
func bucketsOf(slots []SlotRef) []uint64 {
	var out []uint64
	for _, r := range slots {
		out = append(out, r.Bucket)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// parseWrite fills in what the Write that ends an operation holds.
func parseWrite(v *Op, write observe.Record, l Layout) error {
	for _, a := range write.Addrs {
		if b, ok := l.ParseMeta(a); ok {
			v.WroteMeta = append(v.WroteMeta, b)
		} else if b, s, ok := l.ParseSlot(a); ok {
			if v.WroteSlots[b]&(1<<s) != 0 {
				return fmt.Errorf("call %d: Write holds slot %d of bucket %d twice", write.Seq, s, b)
			}
			v.WroteSlots[b] |= 1 << s
		} else {
			return fmt.Errorf("call %d: Write holds %q", write.Seq, a)
		}
	}
	return nil
}

// SameBuckets reports whether got holds exactly the buckets of want (a
// Union: sorted, distinct), each once.
func SameBuckets(what string, got, want []uint64) error {
	g := slices.Clone(got)
	slices.Sort(g)
	if len(slices.Compact(slices.Clone(g))) != len(g) {
		return fmt.Errorf("%s holds a bucket twice", what)
	}
	if !slices.Equal(g, want) {
		return fmt.Errorf("%s holds %d buckets, not exactly the %d of the union: %s", what, len(g), len(want), diff(g, want))
	}
	return nil
}

// diff names the first bucket in one sorted list and not the other.
func diff(got, want []uint64) string {
	for _, b := range got {
		if _, ok := slices.BinarySearch(want, b); !ok {
			return fmt.Sprintf("bucket %d is not in the union", b)
		}
	}
	for _, b := range want {
		if _, ok := slices.BinarySearch(got, b); !ok {
			return fmt.Sprintf("bucket %d is missing", b)
		}
	}
	return "same set"
}

// SlotsPerBucket reports whether reads hold exactly n(b) distinct slots of
// every bucket b of buckets and nothing else.
func SlotsPerBucket(what string, reads []SlotRef, buckets []uint64, n func(uint64) int) error {
	seen := map[uint64]uint64{}
	count := map[uint64]int{}
	for _, r := range reads {
		if seen[r.Bucket]&(1<<r.Slot) != 0 {
			return fmt.Errorf("%s holds slot %d of bucket %d twice", what, r.Slot, r.Bucket)
		}
		seen[r.Bucket] |= 1 << r.Slot
		count[r.Bucket]++
	}
	if len(count) != len(buckets) {
		return fmt.Errorf("%s touches %d buckets, want %d", what, len(count), len(buckets))
	}
	for _, b := range buckets {
		if count[b] != n(b) {
			return fmt.Errorf("%s holds %d slots of bucket %d, want %d", what, count[b], b, n(b))
		}
	}
	return nil
}

// Choices returns, from storage's view alone, every slot the
// path reads of perTree read (the first part of each multi-path read's
// slot Read), as an audit.Choice among the slots of its bucket not read since
// the bucket was last written whole; a bucket has slots slots (Z+S). The
// views must start where every bucket was just written whole (after a
// load or Init). Ring ORAM, as Treebeard Sec. 2 describes it, writes a
// bucket's real blocks to uniformly random slots (the permuted buckets
// invariant), and a path read (Step 2; Sec. 5.3.1 for several paths)
// takes of each bucket the slot of a block it wants there or else a
// uniformly random unread dummy. Neither choice depends on where the blocks lie, so
// whatever storage saw before, the bucket's unread slots hold its unread
// real blocks (stale copies too) and dummies in a uniformly random
// arrangement, and the slot a read takes is uniform among them, real or
// dummy alike. Several slots of one bucket in one read (up to Z) are a
// uniform subset: each is an audit.Choice among the same unread slots, which
// makes Choices a little conservative. A read that takes dummies in
// slot order, or a bucket that puts real blocks in fixed slots, fails
// Choices on this. Early reshuffles' and evictions' reads only mark
// slots read.
func Choices(perTree [][]Op, slots int) []audit.Choice {
	var out []audit.Choice
	all := uint64(1)<<slots - 1
	for _, ops := range perTree {
		read := map[uint64]uint64{} // per bucket: the slots read since it was last written whole
		for _, op := range ops {
			if op.Kind == OpPathRead {
				for _, r := range op.SlotReads[0] {
					unread := all &^ read[r.Bucket]
					out = append(out, audit.Choice{Rank: bits.OnesCount64(unread & (1<<r.Slot - 1)), Unread: bits.OnesCount64(unread)})
				}
			}
			for _, reads := range append(slices.Clone(op.SlotReads), op.EvictReads) {
				for _, r := range reads {
					read[r.Bucket] |= 1 << r.Slot
				}
			}
			for b, mask := range op.WroteSlots {
				if mask == all {
					delete(read, b)
				}
			}
		}
	}
	return out
}
