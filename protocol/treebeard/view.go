package treebeard

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Views returns every tree's operations as storage saw them, in
// Tap order. Every call but the checkpoints' anchor writes must belong to
// exactly one tree and parse as part of an operation.
func Views(records []observe.Record, trees, z int) ([][]ringoram.Op, error) {
	per, err := splitTrees(records, trees)
	if err != nil {
		return nil, err
	}
	out := make([][]ringoram.Op, trees)
	for t, recs := range per {
		if out[t], err = ringoram.View(recs, ringoram.Layout{Prefix: TreePrefix(t)}, z); err != nil {
			return nil, fmt.Errorf("tree %d: %w", t, err)
		}
	}
	return out, nil
}

// splitTrees returns each tree's backend calls in Tap order. A cluster's
// failovers show in it too, and are set aside: a new leader's claim of a
// tree's fence, what it repeats of its predecessor's calls (treeCalls),
// and a deposed leader's write that storage refused because it had
// accepted a later token on the same fence.
func splitTrees(records []observe.Record, trees int) ([][]observe.Record, error) {
	calls := make([]treeCalls, trees)
	highest := map[string]uint64{} // by fence: the highest token storage accepted
	for _, r := range records {
		if r.Err && r.Fence != "" && r.Token < highest[r.Fence] {
			continue // refused: it changed nothing
		}
		if r.Err {
			return nil, fmt.Errorf("call %d (%v) failed", r.Seq, r.Op)
		}
		if r.Fence != "" {
			highest[r.Fence] = max(highest[r.Fence], r.Token)
		}
		if t, ok := claimOf(r, trees); ok {
			calls[t].claim() // it shows only that a leader took over
			continue
		}
		if len(r.Addrs) == 0 {
			return nil, fmt.Errorf("call %d (%v) has no address", r.Seq, r.Op)
		}
		if durable.IsAnchorWrite(r) {
			continue
		}
		owner, err := ownerOf(r, trees)
		if err != nil {
			return nil, err
		}
		calls[owner].add(r)
	}
	out := make([][]observe.Record, trees)
	for t := range calls {
		out[t] = calls[t].done()
	}
	return out, nil
}

// ownerOf returns the tree all of r's addresses belong to.
func ownerOf(r observe.Record, trees int) (int, error) {
	owner := -1
	for t := range trees {
		if strings.HasPrefix(r.Addrs[0], TreePrefix(t)) {
			owner = t
		}
	}
	if owner < 0 {
		return 0, fmt.Errorf("call %d (%v) of %q belongs to no tree", r.Seq, r.Op, r.Addrs[0])
	}
	p := TreePrefix(owner)
	for _, a := range r.Addrs {
		if !strings.HasPrefix(a, p) {
			return 0, fmt.Errorf("call %d (%v) spans trees: %q and %q", r.Seq, r.Op, r.Addrs[0], a)
		}
	}
	return owner, nil
}

// claimOf returns the tree whose fence r claims, a write of no item.
func claimOf(r observe.Record, trees int) (int, bool) {
	t, err := strconv.Atoi(strings.TrimPrefix(r.Fence, fencePrefix))
	if len(r.Addrs) > 0 || !strings.HasPrefix(r.Fence, fencePrefix) || err != nil || t < 0 || t >= trees {
		return 0, false
	}
	return t, true
}

// treeCalls are one tree's calls as splitTrees keeps them.
type treeCalls struct {
	kept []observe.Record
	// claimed: a leader took the tree over, and has since only repeated
	// what its predecessor issued; repeated: it repeated something since
	// the claim; matched marks the Reads of kept it repeated.
	claimed  bool
	repeated bool
	matched  map[int]bool
	// pending is a Write of the buckets of the last one kept, after a
	// claim and with Reads kept since that last one: the last Write
	// repeated, if the Reads are repeated next, or else the Reads'
	// operation's own Write (its outcome committed before the claim).
	pending *observe.Record
}

// claim notes a leader's claim of the tree's fence: what it repeats
// next is set aside.
func (tc *treeCalls) claim() {
	tc.claimed, tc.repeated, tc.matched = true, false, map[int]bool{}
}

// add keeps r, unless it repeats a call of the tree's previous leader
// after a claim. A new leader repeats in order (oramMachine.outstanding):
// first the tree's last Write, which storage may lack, when no Read has
// succeeded since it; then each Read its operation issued since that
// Write whose results the group never committed, with the slots it chose
// (Treebeard Sec. 5.3.3), each once. Storage sees the same addresses
// again, nothing new. A Write of the same buckets after the repeated
// Reads is their operation's own.
func (tc *treeCalls) add(r observe.Record) {
	if !tc.claimed {
		tc.kept = append(tc.kept, r)
		return
	}
	last := tc.lastWrite()
	switch {
	case r.Op == observe.OpWrite && last >= 0 && slices.Equal(tc.kept[last].Addrs, r.Addrs) &&
		(!tc.repeated || tc.pending != nil):
		if tc.pending == nil && last < len(tc.kept)-1 {
			tc.pending = &r // the Reads since tell which it is
		}
		tc.repeated = true
	case r.Op == observe.OpRead && tc.matchRead(last, r):
		tc.pending = nil // the last Write was repeated, then its Reads
		tc.repeated = true
	default:
		tc.claimed = false
		tc.keepPending()
		tc.kept = append(tc.kept, r)
	}
}

// lastWrite returns the index in kept of the last Write, -1 if none.
func (tc *treeCalls) lastWrite() int {
	last := len(tc.kept) - 1
	for last >= 0 && tc.kept[last].Op != observe.OpWrite {
		last--
	}
	return last
}

// matchRead reports whether r repeats a Read kept since the Write at
// index last that no call since the claim repeated yet, and marks it
// repeated.
func (tc *treeCalls) matchRead(last int, r observe.Record) bool {
	for i := last + 1; i < len(tc.kept); i++ {
		k := tc.kept[i]
		if !tc.matched[i] && k.Op == r.Op && slices.Equal(k.Addrs, r.Addrs) {
			tc.matched[i] = true
			return true
		}
	}
	return false
}

// keepPending keeps the pending Write: no repeat of the Reads before it
// followed it, so it was their operation's own.
func (tc *treeCalls) keepPending() {
	if tc.pending != nil {
		tc.kept = append(tc.kept, *tc.pending)
		tc.pending = nil
	}
}

// done returns the calls kept, the pending Write included.
func (tc *treeCalls) done() []observe.Record {
	tc.keepPending()
	return tc.kept
}

// SlotSizes is part of Treebeard's audit (b): every slot storage
// stores or returns has one size and every metadata record another, so
// sizes tell real blocks from dummies no more than addresses do.
func SlotSizes(records []observe.Record, trees int) error {
	slot, meta := -1, -1
	for _, r := range records {
		for i, a := range r.Addrs {
			for t := range trees {
				l := ringoram.Layout{Prefix: TreePrefix(t)}
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

// Stored returns the buckets of union (sorted) that storage
// holds: those below the top cached levels an ORAM shard holds in
// trusted memory (at most the levels above the leaves).
func Stored(geo tree.Geometry, cached int, union []uint64) []uint64 {
	top := min(max(cached, 0), geo.L)
	return slices.DeleteFunc(union, func(b uint64) bool { return geo.Level(b) < top })
}

// EvictionSizes returns the number of paths of each eviction
// of ops as storage shows it: the leaf buckets it rewrites, exact while
// an eviction's paths are fewer than the leaves (that many consecutive
// reverse-lexicographic paths end at distinct leaves).
func EvictionSizes(geo tree.Geometry, ops []ringoram.Op) []int {
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

// EvictionOrder is Treebeard's audit (d) for one tree, from
// storage's view (Ring ORAM's reverse-lexicographic EvictPath, Treebeard
// Sec. 5.3.3): the i-th eviction reads and rewrites exactly the union of
// the paths ReverseLexLeaf(c), ..., ReverseLexLeaf(c+ks[i]-1) below the
// cached top levels (Stored), c being the
// number of paths evicted before it (0 after the load), and ks[i] is a
// multiple of k. ks[i] is the eviction's number of paths (from a trace, or
// EvictionSizes); storage also shows it whenever it is below the
// number of leaves: it must then be the number of leaf buckets rewritten.
func EvictionOrder(geo tree.Geometry, cached, k int, ops []ringoram.Op, ks []int) error {
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
func evictionAt(geo tree.Geometry, cached, k int, op ringoram.Op, c uint64, n int) error {
	if n < k || n%k != 0 {
		return fmt.Errorf("%d paths, not a multiple of k=%d", n, k)
	}
	leaves := make([]uint64, n)
	for j := range leaves {
		leaves[j] = geo.ReverseLexLeaf(c + uint64(j))
	}
	want := Stored(geo, cached, geo.Union(leaves, nil))
	union, _ := op.Eviction()
	if err := ringoram.SameBuckets("eviction slot Read", union, want); err != nil {
		return err
	}
	var written []uint64
	for b := range op.WroteSlots { // a multi-path read's also holds its reshuffles
		if _, ok := slices.BinarySearch(want, b); ok || op.Kind == ringoram.OpEviction {
			written = append(written, b)
		}
	}
	if err := ringoram.SameBuckets("eviction Write", written, want); err != nil {
		return err
	}
	if got := leafBuckets(geo, union); uint64(n) < geo.Leaves() && got != n {
		return fmt.Errorf("an eviction of %d paths rewrites %d leaf buckets", n, got)
	}
	return nil
}

// Reshuffles is Treebeard's audit (e) for one tree, from
// storage's view alone (Ring ORAM's EarlyReshuffle, Treebeard Sec. 5.3.3).
// Per bucket it counts the path reads' slot reads since the bucket's last
// full rewrite (a Write of all its Z+S slots; the load rewrote every
// bucket). A full rewrite by a multi-path read (an early reshuffle) must
// come exactly when that count exceeds S-Z (fewer than Z dummies left),
// and the count never exceeds S. Also, no slot is read twice between two
// rewrites of its bucket (Ring ORAM reads only valid slots), whether by a
// path read, a reshuffle or an eviction.
func Reshuffles(z, s int, ops []ringoram.Op) error {
	r := reshuffleState{z: z, s: s, count: map[uint64]int{}, read: map[uint64]uint64{}}
	for _, op := range ops {
		if err := r.apply(op); err != nil {
			return fmt.Errorf("call %d: %w", op.Seq, err)
		}
	}
	return nil
}

// reshuffleState is what Reshuffles tracks per bucket since its
// last rewrite: path reads' slot reads, and the slots read.
type reshuffleState struct {
	z, s  int
	count map[uint64]int
	read  map[uint64]uint64
}

func (r *reshuffleState) apply(op ringoram.Op) error {
	for _, reads := range append(slices.Clone(op.SlotReads), op.EvictReads) {
		for _, x := range reads {
			if r.read[x.Bucket]&(1<<x.Slot) != 0 {
				return fmt.Errorf("slot %d of bucket %d read twice since the bucket was rewritten", x.Slot, x.Bucket)
			}
			r.read[x.Bucket] |= 1 << x.Slot
		}
	}
	if op.Kind == ringoram.OpPathRead {
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
		if op.Kind == ringoram.OpPathRead && !evicted && r.count[b] <= r.s-r.z {
			return fmt.Errorf("bucket %d reshuffled after %d reads; S=%d, Z=%d", b, r.count[b], r.s, r.z)
		}
		delete(r.count, b)
		delete(r.read, b)
	}
	if op.Kind == ringoram.OpPathRead {
		for _, x := range op.SlotReads[0] {
			if r.count[x.Bucket] > r.s-r.z {
				return fmt.Errorf("bucket %d read %d times and not reshuffled; S=%d, Z=%d", x.Bucket, r.count[x.Bucket], r.s, r.z)
			}
		}
	}
	return nil
}

// LeafCells returns, from storage's view, how often each (tree,
// leaf bin) cell was read: every multi-path read's slot Read takes a slot
// of the leaf bucket of each distinct path it reads, which names the
// path's leaf. Cell t*bins + leaf*bins/leaves.
func LeafCells(geo tree.Geometry, perTree [][]ringoram.Op, bins int) []int {
	cells := make([]int, len(perTree)*bins)
	for t, ops := range perTree {
		for _, op := range ops {
			if op.Kind != ringoram.OpPathRead {
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

// DistinctLeaves returns, from storage's view, the histogram of
// the number of distinct paths each multi-path read reads: the leaf
// buckets its slot Read takes slots of.
func DistinctLeaves(geo tree.Geometry, perTree [][]ringoram.Op) audit.Histogram {
	var h audit.Histogram
	for _, ops := range perTree {
		for _, op := range ops {
			if op.Kind == ringoram.OpPathRead {
				h.Add(leafBuckets(geo, op.Union))
			}
		}
	}
	return h
}

// SlotOffsets returns how often path reads read each slot offset
// of a bucket (the slot Read of every multi-path read).
func SlotOffsets(perTree [][]ringoram.Op, slots int) []int {
	out := make([]int, slots)
	for _, ops := range perTree {
		for _, op := range ops {
			if op.Kind == ringoram.OpPathRead {
				for _, r := range op.SlotReads[0] {
					out[r.Slot]++
				}
			}
		}
	}
	return out
}

// EvictionCount is Treebeard's audit (g): every tree evicts k
// paths per A of its path reads, whatever the reads were for (fake reads
// included, Treebeard Sec. 5.2.1), so with reads path reads over trees
// trees the paths evicted in all are k*E with E between
// (reads - trees(A-1))/A and reads/A (each tree rounds its share down).
func EvictionCount(name string, paths, reads, trees, a, k int) audit.Check {
	lo := k * int(math.Ceil(float64(reads-trees*(a-1))/float64(a)))
	hi := k * (reads / a)
	var violations []string
	if paths < lo || paths > hi {
		violations = append(violations, fmt.Sprintf("%d paths evicted after %d path reads; want %d to %d", paths, reads, lo, hi))
	}
	c := audit.Exact(name+": k paths evicted per A path reads", violations)
	if c.Pass() {
		c.Detail = fmt.Sprintf("%d paths evicted after %d path reads (%d to %d)", paths, reads, lo, hi)
	}
	return c
}

// SameLeaf checks that the paths of one multi-path read end at
// one leaf no more often than random leaves do. With Z > 1 storage sees
// it: a leaf bucket gives one slot per path ending there, up to Z, so the
// slots a read takes from leaf buckets count its paths n. Of L leaves,
// n uniform paths leave L(1 - q^n - (n/L)q^(n-1)) leaf buckets with two
// or more, q = 1 - 1/L, and the count over many reads is close to
// Poisson (audit.Excess). A repeated request that reads its block's real
// path again (instead of Sec. 5.2.1's fake read) fails it under a hot
// key. With Z = 1 it does not apply and passes with a note.
func SameLeaf(name string, geo tree.Geometry, z int, perTree [][]ringoram.Op) audit.Check {
	if z < 2 {
		return audit.Check{Name: name, Critical: 0, P: 1, Detail: "not visible with Z = 1"}
	}
	twice, expected := 0, 0.0
	for _, ops := range perTree {
		for _, op := range ops {
			if op.Kind != ringoram.OpPathRead {
				continue
			}
			per, paths := map[uint64]int{}, 0
			for _, r := range op.SlotReads[0] {
				if _, ok := geo.LeafOf(r.Bucket); ok {
					per[r.Bucket]++
					paths++
				}
			}
			expected += sharedLeaves(paths, geo.Leaves())
			for _, n := range per {
				if n > 1 {
					twice++
				}
			}
		}
	}
	return audit.Excess(name, twice, expected, fmt.Sprintf("%d leaf buckets read for two paths of one multi-path read", twice))
}

// sharedLeaves is how many of leaves leaves n uniformly random paths
// end at two or more of, on average: leaves(1 - q^n - (n/leaves)q^(n-1)),
// q = 1 - 1/leaves.
func sharedLeaves(n int, leaves uint64) float64 {
	if n < 2 {
		return 0
	}
	l, q := float64(leaves), 1-1/float64(leaves)
	return l * (1 - math.Pow(q, float64(n)) - float64(n)/l*math.Pow(q, float64(n-1)))
}

// ReadsPerEpoch checks that every tree makes at most one
// multi-path read per epoch: a tree reads the paths of a whole epoch at
// once, when every Stash shard's part of it has come (Treebeard Sec.
// 5.3.1), so its multi-path reads do not follow how the epoch's keys
// hash to the shards. It needs epochs storage can tell apart, as a driver
// that ends each epoch itself and waits for its replies gives them:
// rounds[r] is the Tap sequence number of the last call before epoch r
// ended, and epoch r's reads are the calls after it (up to rounds[r+1]).
// It is exact.
func ReadsPerEpoch(name string, perTree [][]ringoram.Op, rounds []uint64) audit.Check {
	var violations []string
	for t, ops := range perTree {
		r, n := 0, 0 // the round of the reads counted, and how many
		for _, op := range ops {
			if op.Kind != ringoram.OpPathRead {
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
	return audit.Exact(name+": one multi-path read per tree and epoch", violations)
}
