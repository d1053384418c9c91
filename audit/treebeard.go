package audit

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// TreebeardPrefix is the prefix of every storage address of Treebeard's
// tree t (protocol/treebeard.TreePrefix; its audit test checks they agree).
func TreebeardPrefix(t int) string { return fmt.Sprintf("tb/%d/", t) }

// TreeOpKind is what an operation of a Treebeard tree is, told from its
// shape alone.
type TreeOpKind int

// The operations of a tree.
const (
	TreePathRead TreeOpKind = iota // a multi-path read (Treebeard Sec. 5.3.1)
	TreeEviction                   // an eviction of k paths or a multiple (Ring ORAM's EvictPath)
)

func (k TreeOpKind) String() string { return [...]string{"multi-path read", "eviction"}[k] }

// SlotRef is one slot of a bucket.
type SlotRef struct {
	Bucket uint64
	Slot   int
}

// TreeOp is one operation of a tree as storage saw it: the Reads of a
// multi-path read or an eviction and the Write that ends it. A multi-path
// read is a Read of up to Z slots per bucket (one per path crossing it),
// followed in the same Read by Z slots of each bucket an early reshuffle
// rewrites, and a Write of the metadata (plus the reshuffled buckets'
// slots); an eviction is a Read of Z slots per bucket and a Write of
// every slot of every bucket. A multi-path read may evict too, in the
// same round trip (ringoram.Tree.ReadEvict): its slot Read is followed by
// the eviction's, and its Write holds both. Any may start with a Read of
// the metadata the tree has no copy of (none after a load, which writes
// them all; after a recovery, each bucket's the first time a union holds
// it).
type TreeOp struct {
	Seq        uint64 // Tap sequence number of its first call
	Kind       TreeOpKind
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
func (op TreeOp) Eviction() ([]uint64, bool) {
	if op.Kind == TreeEviction {
		return op.Union, true
	}
	return op.EvictUnion, len(op.EvictUnion) > 0
}

// TreebeardViews returns every tree's operations as storage saw them, in
// Tap order. Every call but the checkpoints' anchor writes must belong to
// exactly one tree and parse as part of an operation.
func TreebeardViews(records []observe.Record, trees, z int) ([][]TreeOp, error) {
	per, err := splitTrees(records, trees)
	if err != nil {
		return nil, err
	}
	out := make([][]TreeOp, trees)
	for t, recs := range per {
		if out[t], err = TreeView(recs, ringoram.Layout{Prefix: TreebeardPrefix(t)}, z); err != nil {
			return nil, fmt.Errorf("tree %d: %w", t, err)
		}
	}
	return out, nil
}

// splitTrees returns each tree's backend calls in Tap order.
func splitTrees(records []observe.Record, trees int) ([][]observe.Record, error) {
	out := make([][]observe.Record, trees)
	for _, r := range records {
		if len(r.Addrs) == 0 {
			return nil, fmt.Errorf("call %d (%v) has no address", r.Seq, r.Op)
		}
		if r.Err {
			return nil, fmt.Errorf("call %d (%v) failed", r.Seq, r.Op)
		}
		if isAnchorWrite(r) {
			continue
		}
		owner := -1
		for t := range trees {
			if strings.HasPrefix(r.Addrs[0], TreebeardPrefix(t)) {
				owner = t
			}
		}
		if owner < 0 {
			return nil, fmt.Errorf("call %d (%v) of %q belongs to no tree", r.Seq, r.Op, r.Addrs[0])
		}
		p := TreebeardPrefix(owner)
		for _, a := range r.Addrs {
			if !strings.HasPrefix(a, p) {
				return nil, fmt.Errorf("call %d (%v) spans trees: %q and %q", r.Seq, r.Op, r.Addrs[0], a)
			}
		}
		out[owner] = append(out[owner], r)
	}
	return out, nil
}

// isAnchorWrite reports whether r is a checkpoint's anchor write
// (internal/durable): the one call of a journaled store outside its
// layout.
func isAnchorWrite(r observe.Record) bool {
	return r.Op == observe.OpWrite && len(r.Addrs) == 1 && r.Addrs[0] == durable.AnchorAddr
}

// TreeView returns the operations of one Ring ORAM tree (package
// ringoram) laid out by l, with z real blocks per bucket, as storage saw
// them: records, its calls only, grouped into operations (Reads, then the
// Write that ends them), each parsed. TreebeardViews is every tree's.
func TreeView(records []observe.Record, l ringoram.Layout, z int) ([]TreeOp, error) {
	var ops []TreeOp
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
func parseOp(reads []observe.Record, write observe.Record, l ringoram.Layout, z int) (TreeOp, error) {
	v := TreeOp{Seq: write.Seq, WroteSlots: map[uint64]uint64{}}
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
		v.Kind = TreeEviction // slots written, no bucket read more than Z times, and an eviction's shape
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
func slotRefs(r observe.Record, l ringoram.Layout) ([]SlotRef, error) {
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
func parseWrite(v *TreeOp, write observe.Record, l ringoram.Layout) error {
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

// TreebeardSizes is part of Treebeard's audit (b): every slot storage
// stores or returns has one size and every metadata record another, so
// sizes tell real blocks from dummies no more than addresses do.
func TreebeardSizes(records []observe.Record, trees int) error {
	slot, meta := -1, -1
	for _, r := range records {
		for i, a := range r.Addrs {
			for t := range trees {
				l := ringoram.Layout{Prefix: TreebeardPrefix(t)}
				want := &slot
				if _, ok := l.ParseMeta(a); ok {
					want = &meta
				} else if _, _, ok := l.ParseSlot(a); !ok {
					continue
				}
				if *want < 0 {
					*want = r.Sizes[i]
				}
				if r.Sizes[i] != *want {
					return fmt.Errorf("call %d (%v): %q is %d bytes, others of its kind %d", r.Seq, r.Op, a, r.Sizes[i], *want)
				}
			}
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

// TreebeardStored returns the buckets of union (sorted) that storage
// holds: those below the top cached levels an ORAM shard holds in
// trusted memory (at most the levels above the leaves).
func TreebeardStored(geo tree.Geometry, cached int, union []uint64) []uint64 {
	top := min(max(cached, 0), geo.L)
	return slices.DeleteFunc(union, func(b uint64) bool { return geo.Level(b) < top })
}

// TreebeardEvictionSizes returns the number of paths of each eviction
// of ops as storage shows it: the leaf buckets it rewrites, exact while
// an eviction's paths are fewer than the leaves (that many consecutive
// reverse-lexicographic paths end at distinct leaves).
func TreebeardEvictionSizes(geo tree.Geometry, ops []TreeOp) []int {
	var ks []int
	for _, op := range ops {
		if union, ok := op.Eviction(); ok {
			ks = append(ks, leafBuckets(geo, union))
		}
	}
	return ks
}

func leafBuckets(geo tree.Geometry, union []uint64) int {
	n := 0
	for _, b := range union {
		if geo.Level(b) == geo.L {
			n++
		}
	}
	return n
}

// TreebeardEvictionOrder is Treebeard's audit (d) for one tree, from
// storage's view (Ring ORAM's reverse-lexicographic EvictPath, Treebeard
// Sec. 5.3.3): the i-th eviction reads and rewrites exactly the union of
// the paths ReverseLexLeaf(c), ..., ReverseLexLeaf(c+ks[i]-1) below the
// cached top levels (TreebeardStored), c being the
// number of paths evicted before it (0 after the load), and ks[i] is a
// multiple of k. ks[i] is the eviction's number of paths (from a trace, or
// TreebeardEvictionSizes); storage also shows it whenever it is below the
// number of leaves: it must then be the number of leaf buckets rewritten.
func TreebeardEvictionOrder(geo tree.Geometry, cached, k int, ops []TreeOp, ks []int) error {
	var c uint64
	i := 0
	for _, op := range ops {
		if _, ok := op.Eviction(); !ok {
			continue
		}
		if i >= len(ks) {
			return fmt.Errorf("call %d: eviction %d, only %d expected", op.Seq, i, len(ks))
		}
		if err := evictionAt(geo, cached, k, op, c, ks[i]); err != nil {
			return fmt.Errorf("call %d: eviction %d (paths %d..%d in reverse-lexicographic order): %w", op.Seq, i, c, c+uint64(ks[i])-1, err)
		}
		c += uint64(ks[i])
		i++
	}
	if i != len(ks) {
		return fmt.Errorf("%d evictions on storage, %d expected", i, len(ks))
	}
	return nil
}

// evictionAt checks one eviction of n paths, the first being the c-th in
// reverse-lexicographic order.
func evictionAt(geo tree.Geometry, cached, k int, op TreeOp, c uint64, n int) error {
	if n < k || n%k != 0 {
		return fmt.Errorf("%d paths, not a multiple of k=%d", n, k)
	}
	leaves := make([]uint64, n)
	for j := range leaves {
		leaves[j] = geo.ReverseLexLeaf(c + uint64(j))
	}
	want := TreebeardStored(geo, cached, geo.Union(leaves, nil))
	union, _ := op.Eviction()
	if err := SameBuckets("eviction slot Read", union, want); err != nil {
		return err
	}
	var written []uint64
	for b := range op.WroteSlots { // a multi-path read's also holds its reshuffles
		if _, ok := slices.BinarySearch(want, b); ok || op.Kind == TreeEviction {
			written = append(written, b)
		}
	}
	if err := SameBuckets("eviction Write", written, want); err != nil {
		return err
	}
	if got := leafBuckets(geo, union); uint64(n) < geo.Leaves() && got != n {
		return fmt.Errorf("an eviction of %d paths rewrites %d leaf buckets", n, got)
	}
	return nil
}

// TreebeardReshuffles is Treebeard's audit (e) for one tree, from
// storage's view alone (Ring ORAM's EarlyReshuffle, Treebeard Sec. 5.3.3).
// Per bucket it counts the path reads' slot reads since the bucket's last
// full rewrite (a Write of all its Z+S slots; the load rewrote every
// bucket). A full rewrite by a multi-path read (an early reshuffle) must
// come exactly when that count exceeds S-Z (fewer than Z dummies left),
// and the count never exceeds S. Also, no slot is read twice between two
// rewrites of its bucket (Ring ORAM reads only valid slots), whether by a
// path read, a reshuffle or an eviction.
func TreebeardReshuffles(z, s int, ops []TreeOp) error {
	r := reshuffleState{z: z, s: s, count: map[uint64]int{}, read: map[uint64]uint64{}}
	for _, op := range ops {
		if err := r.apply(op); err != nil {
			return fmt.Errorf("call %d: %w", op.Seq, err)
		}
	}
	return nil
}

// reshuffleState is what TreebeardReshuffles tracks per bucket since its
// last rewrite: path reads' slot reads, and the slots read.
type reshuffleState struct {
	z, s  int
	count map[uint64]int
	read  map[uint64]uint64
}

func (r *reshuffleState) apply(op TreeOp) error {
	for _, reads := range append(slices.Clone(op.SlotReads), op.EvictReads) {
		for _, x := range reads {
			if r.read[x.Bucket]&(1<<x.Slot) != 0 {
				return fmt.Errorf("slot %d of bucket %d read twice since the bucket was rewritten", x.Slot, x.Bucket)
			}
			r.read[x.Bucket] |= 1 << x.Slot
		}
	}
	if op.Kind == TreePathRead {
		for _, x := range op.SlotReads[0] {
			if r.count[x.Bucket]++; r.count[x.Bucket] > r.s {
				return fmt.Errorf("bucket %d read %d times since its last rewrite; S=%d", x.Bucket, r.count[x.Bucket], r.s)
			}
		}
	}
	all := uint64(1)<<(r.z+r.s) - 1
	for b, mask := range op.WroteSlots {
		if mask != all {
			return fmt.Errorf("a partial rewrite of bucket %d (slots %b)", b, mask)
		}
		_, evicted := slices.BinarySearch(op.EvictUnion, b)
		if op.Kind == TreePathRead && !evicted && r.count[b] <= r.s-r.z {
			return fmt.Errorf("bucket %d reshuffled after %d reads; S=%d, Z=%d", b, r.count[b], r.s, r.z)
		}
		delete(r.count, b)
		delete(r.read, b)
	}
	if op.Kind == TreePathRead {
		for _, x := range op.SlotReads[0] {
			if r.count[x.Bucket] > r.s-r.z {
				return fmt.Errorf("bucket %d read %d times and not reshuffled; S=%d, Z=%d", x.Bucket, r.count[x.Bucket], r.s, r.z)
			}
		}
	}
	return nil
}

// TreebeardLeafCells returns, from storage's view, how often each (tree,
// leaf bin) cell was read: every multi-path read's slot Read takes a slot
// of the leaf bucket of each distinct path it reads, which names the
// path's leaf. Cell t*bins + leaf*bins/leaves.
func TreebeardLeafCells(geo tree.Geometry, perTree [][]TreeOp, bins int) []int {
	cells := make([]int, len(perTree)*bins)
	for t, ops := range perTree {
		for _, op := range ops {
			if op.Kind != TreePathRead {
				continue
			}
			for _, b := range op.Union {
				if leaf, ok := geo.LeafOf(b); ok {
					cells[t*bins+int(leaf*uint64(bins)/geo.Leaves())]++
				}
			}
		}
	}
	return cells
}

// SumRows sums cells in rows of len(cells)/rows: the reads per tree of
// TreebeardLeafCells.
func SumRows(cells []int, rows int) []int {
	out := make([]int, rows)
	per := len(cells) / rows
	for i, c := range cells {
		out[i/per] += c
	}
	return out
}

// TreebeardDistinctLeaves returns, from storage's view, the histogram of
// the number of distinct paths each multi-path read reads: the leaf
// buckets its slot Read takes slots of.
func TreebeardDistinctLeaves(geo tree.Geometry, perTree [][]TreeOp) Histogram {
	var h Histogram
	for _, ops := range perTree {
		for _, op := range ops {
			if op.Kind == TreePathRead {
				h.Add(leafBuckets(geo, op.Union))
			}
		}
	}
	return h
}

// TreebeardSlotOffsets returns how often path reads read each slot offset
// of a bucket (the slot Read of every multi-path read).
func TreebeardSlotOffsets(perTree [][]TreeOp, slots int) []int {
	out := make([]int, slots)
	for _, ops := range perTree {
		for _, op := range ops {
			if op.Kind == TreePathRead {
				for _, r := range op.SlotReads[0] {
					out[r.Slot]++
				}
			}
		}
	}
	return out
}

// TreebeardChoices returns, from storage's view alone, every slot the
// path reads of perTree read (the first part of each multi-path read's
// slot Read), as a Choice among the slots of its bucket not read since
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
// uniform subset: each is a Choice among the same unread slots, which
// makes Choices a little conservative. A read that takes dummies in
// slot order, or a bucket that puts real blocks in fixed slots, fails
// Choices on this. Early reshuffles' and evictions' reads only mark
// slots read.
func TreebeardChoices(perTree [][]TreeOp, slots int) []Choice {
	var out []Choice
	all := uint64(1)<<slots - 1
	for _, ops := range perTree {
		read := map[uint64]uint64{} // per bucket: the slots read since it was last written whole
		for _, op := range ops {
			if op.Kind == TreePathRead {
				for _, r := range op.SlotReads[0] {
					unread := all &^ read[r.Bucket]
					out = append(out, Choice{Rank: bits.OnesCount64(unread & (1<<r.Slot - 1)), Unread: bits.OnesCount64(unread)})
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

// TreebeardEvictionCount is Treebeard's audit (g): every tree evicts k
// paths per A of its path reads, whatever the reads were for (fake reads
// included, Treebeard Sec. 5.2.1), so with reads path reads over trees
// trees the paths evicted in all are k*E with E between
// (reads - trees(A-1))/A and reads/A (each tree rounds its share down).
func TreebeardEvictionCount(name string, paths, reads, trees, a, k int) Check {
	lo := k * int(math.Ceil(float64(reads-trees*(a-1))/float64(a)))
	hi := k * (reads / a)
	var violations []string
	if paths < lo || paths > hi {
		violations = append(violations, fmt.Sprintf("%d paths evicted after %d path reads; want %d to %d", paths, reads, lo, hi))
	}
	c := Exact(name+": k paths evicted per A path reads", violations)
	if c.Pass() {
		c.Detail = fmt.Sprintf("%d paths evicted after %d path reads (%d to %d)", paths, reads, lo, hi)
	}
	return c
}

// TreebeardSameLeaf checks that the paths of one multi-path read end at
// one leaf no more often than random leaves do. With Z > 1 storage sees
// it: a leaf bucket gives one slot per path ending there, up to Z. A
// multi-path read of d distinct leaves holds about d(d-1)/2 pairs of
// paths, each on one leaf with probability 1/leaves, so the count of
// leaf buckets read twice is close to Poisson (Excess). A repeated
// request that reads its block's real path again (instead of Sec.
// 5.2.1's fake read) fails it under a hot key. With Z = 1 it does not
// apply and passes with a note.
func TreebeardSameLeaf(name string, geo tree.Geometry, z int, perTree [][]TreeOp) Check {
	if z < 2 {
		return Check{Name: name, Critical: 0, P: 1, Detail: "not visible with Z = 1"}
	}
	twice, expected := 0, 0.0
	for _, ops := range perTree {
		for _, op := range ops {
			if op.Kind != TreePathRead {
				continue
			}
			per := map[uint64]int{}
			for _, r := range op.SlotReads[0] {
				if _, ok := geo.LeafOf(r.Bucket); ok {
					per[r.Bucket]++
				}
			}
			d := float64(len(per))
			expected += d * (d - 1) / 2 / float64(geo.Leaves())
			for _, n := range per {
				if n > 1 {
					twice++
				}
			}
		}
	}
	return Excess(name, twice, expected, fmt.Sprintf("%d leaf buckets read for two paths of one multi-path read", twice))
}

// TreebeardReadsPerEpoch checks that every tree makes at most one
// multi-path read per epoch: a tree reads the paths of a whole epoch at
// once, when every Stash shard's part of it has come (Treebeard Sec.
// 5.3.1), so its multi-path reads do not follow how the epoch's keys
// hash to the shards. It needs epochs storage can tell apart, as a driver
// that ends each epoch itself and waits for its replies gives them:
// rounds[r] is the Tap sequence number of the last call before epoch r
// ended, and epoch r's reads are the calls after it (up to rounds[r+1]).
// It is exact.
func TreebeardReadsPerEpoch(name string, perTree [][]TreeOp, rounds []uint64) Check {
	var violations []string
	for t, ops := range perTree {
		r, n := 0, 0 // the round of the reads counted, and how many
		for _, op := range ops {
			if op.Kind != TreePathRead {
				continue
			}
			for r+1 < len(rounds) && op.Seq > rounds[r+1] {
				r, n = r+1, 0
			}
			if n++; n == 2 {
				violations = append(violations, fmt.Sprintf("tree %d, round %d: two multi-path reads", t, r))
			}
		}
	}
	return Exact(name+": one multi-path read per tree and epoch", violations)
}
