package ringoram

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// ReadEvict is a multi-path read (ReadPaths) followed by an eviction of
// the next k paths (Evict), in one round trip: its two slot Reads go to
// storage together (backend.Pipeline), then ONE atomic Write holds both.
// The calls are those of ReadPaths, except that its slot Read is followed
// by the eviction's, and:
//
//   - the eviction's Read takes Z slots of each bucket of its union as
//     Evict does, from what the multi-path read left: a bucket both read
//     and evicted gives the multi-path read its min(c, Z) slots and the
//     eviction Z others;
//   - a bucket of the eviction's union is never reshuffled early: the
//     eviction rewrites it in the same Write;
//   - the Write holds the metadata of every bucket of both unions, and all
//     the slots of the buckets reshuffled and of the eviction's union.
//
// Both unions depend only on the leaves read and on k, as each
// operation's does alone, so storage learns what it would from the two
// one after the other, in one round trip instead of two (Treebeard Sec.
// 5.3: the eviction follows the read it is owed after, and nothing
// between them reaches storage). The eviction places the blocks offered
// and those it reads, not the blocks the multi-path read takes out: those
// go to their requests, and to a later eviction. k = 0 is ReadPaths;
// no reqs is Evict; neither does nothing. It returns ReadPaths' results
// and Evict's placements.
func (t *Tree) ReadEvict(ctx context.Context, reqs []PathRead, k int, blocks []Block) ([]ReadResult, []int64, error) {
	results, where, _, err := t.readEvict(ctx, reqs, k, blocks)
	return results, where, err
}

// readEvict is ReadEvict, returning the operation's Change too.
func (t *Tree) readEvict(ctx context.Context, reqs []PathRead, k int, blocks []Block) ([]ReadResult, []int64, Change, error) {
	leaves := make([]uint64, len(reqs))
	for i, r := range reqs {
		if r.Leaf >= t.g.Leaves() {
			return nil, nil, Change{}, fmt.Errorf("ringoram: read of leaf %d in a tree of %d leaves", r.Leaf, t.g.Leaves())
		}
		leaves[i] = r.Leaf
	}
	if k < 0 {
		return nil, nil, Change{}, fmt.Errorf("ringoram: eviction of %d paths", k)
	}
	if len(reqs) == 0 && k == 0 {
		return nil, nil, Change{}, nil
	}
	if err := t.checkBlocks(blocks); err != nil {
		return nil, nil, Change{}, err
	}
	if err := t.begin(ctx, Plan{Reads: reqs, Evict: k}); err != nil {
		return nil, nil, Change{}, err
	}
	op, err := t.plan(ctx, reqs, leaves, k)
	if err != nil {
		return nil, nil, Change{}, err
	}
	got, err := t.readSlotLists(ctx, op.union, op.checked, op.lists())
	if err != nil {
		return nil, nil, Change{}, err
	}
	results := op.answer(got[0])
	where, c, ws, err := t.rewrites(op, got, blocks)
	if err != nil {
		return nil, nil, Change{}, err
	}
	if err := t.writeChange(ctx, ws, &c); err != nil {
		return nil, nil, Change{}, err
	}
	t.count(op, len(reqs), k)
	return results, where, c, nil
}

// access is an operation planned before any slot is read: which slots
// its Reads take and what it will rewrite. Indices are into union, the
// buckets below the top of the read's and the eviction's paths.
type access struct {
	k       int // paths evicted
	readN   int // buckets of the read's paths below the top
	union   []uint64
	metas   []meta // the metadata as the operation leaves it
	checked []meta // the metadata the slots read are checked against
	results []ReadResult
	taken   []tree.Block // blocks of the read taken out so far
	hits    int          // of them, from the top
	top     []TopBucket  // top buckets the read took blocks from, as it leaves them

	reads   []slotRead // the multi-path read's slots
	owner   []int32    // per read: the request it serves, or -1
	due     []int      // buckets reshuffled early
	shuffle []slotRead // Z slots of each bucket due
	evicted []uint64   // the eviction's paths' buckets, top included
	evict   []int      // the eviction's buckets below the top
	evReads []slotRead // Z slots of each of them
}

// plan chooses every slot the operation reads: the multi-path read's
// (pathSlots), the early reshuffles' and the eviction's (realSlotsOf),
// from metadata read first where the Tree has no copy.
func (t *Tree) plan(ctx context.Context, reqs []PathRead, leaves []uint64, k int) (*access, error) {
	op := &access{k: k, results: make([]ReadResult, len(reqs))}
	var claimed map[tree.BlockID]bool
	op.taken, op.top, claimed = t.takeTop(reqs, op.results)
	op.hits = len(op.taken)
	_, read := t.top.split(t.g.Union(leaves, nil))
	op.readN = len(read)
	var evict []uint64
	if k > 0 {
		op.evicted = t.g.Union(t.EvictionLeaves(k), nil)
		_, evict = t.top.split(op.evicted)
	}
	op.union = mergeSorted(read, evict)
	metas, err := t.readMeta(ctx, op.union)
	if err != nil {
		return nil, err
	}
	op.reads, op.owner = t.pathSlots(reqs, op.union, metas, claimed)
	op.checked = t.copyMetas(metas)
	for _, r := range op.reads {
		metas[r.i].consume(r.slot)
	}
	op.metas = metas
	for _, b := range evict {
		op.evict = append(op.evict, index(op.union, b))
	}
	for _, i := range t.due(metas) {
		if !slices.Contains(op.evict, i) {
			op.due = append(op.due, i)
		}
	}
	op.shuffle = t.realSlotsOf(op.union, metas, op.due)
	op.evReads = t.realSlotsOf(op.union, metas, op.evict)
	return op, nil
}

// lists returns the operation's slot Reads: the multi-path read's slots
// and then its reshuffles', and the eviction's, each when there is one.
func (op *access) lists() [][]slotRead {
	var lists [][]slotRead
	if len(op.results) > 0 {
		lists = append(lists, slices.Concat(op.reads, op.shuffle))
	}
	if len(op.evict) > 0 {
		lists = append(lists, op.evReads)
	}
	return lists
}

// answer hands each request the block its slot held.
func (op *access) answer(got []tree.Block) []ReadResult {
	if len(op.results) == 0 {
		return nil
	}
	for j := range op.reads {
		if op.owner[j] >= 0 {
			op.results[op.owner[j]] = ReadResult{Block: got[j], Found: true}
			op.taken = append(op.taken, got[j])
		}
	}
	return op.results
}

// rewrites plans the operation's Write from the slots read (got, as
// lists): new metadata for every bucket of the union, the buckets due
// laid out afresh with their live blocks, and the eviction's buckets with
// the blocks placed in them (place). It returns where each block offered
// went and the operation's Change.
func (t *Tree) rewrites(op *access, got [][]tree.Block, blocks []Block) ([]int64, Change, []bucketWrite, error) {
	c := Change{Taken: op.taken, Top: op.top}
	var shuffled []tree.Block
	if len(op.results) > 0 {
		shuffled = got[0][len(op.reads):]
	}
	kept := t.keptBlocks(op.union, op.metas, op.due, op.shuffle, shuffled)
	ws := t.reshuffle(op.union, op.metas, op.due, kept)
	if len(op.evict) == 0 {
		return nil, c, ws, nil
	}
	top, _ := t.top.split(op.evicted)
	inTop := t.topAfter(top, op.top)
	read := t.keptBlocks(op.union, op.metas, op.evict, op.evReads, got[len(got)-1])
	contents, where, err := t.place(op.evicted, slices.Concat(inTop, read), blocks)
	if err != nil {
		return nil, c, nil, err
	}
	n := t.p.slots()
	slots := make([]*tree.Block, len(op.evict)*n)
	for j, i := range op.evict {
		ws[i] = t.rewrite(op.union[i], &op.metas[i], contents[len(top)+j], slots[j*n:(j+1)*n])
	}
	c.Evicted = op.k
	for j, b := range where {
		if b >= 0 {
			c.Placed = append(c.Placed, Placement{ID: blocks[j].Block.ID, Bucket: uint64(b), Leaf: blocks[j].Leaf, Value: blocks[j].Block.Value})
		}
	}
	c.Top = mergeTop(op.top, t.topWrites(top, contents[:len(top)]))
	c.Lifted = lifted(contents[:len(top)], read)
	return where, c, ws, nil
}

// lifted returns the blocks of an eviction's top buckets' new contents
// (top) that it read from storage (read, by bucket): a block the top held
// gives way to them as it moves down.
func lifted(top, read [][]Block) []tree.Block {
	fromStorage := map[tree.BlockID]bool{}
	for _, blocks := range read {
		for _, b := range blocks {
			fromStorage[b.Block.ID] = true
		}
	}
	var out []tree.Block
	for _, blocks := range top {
		for _, b := range blocks {
			if fromStorage[b.Block.ID] {
				out = append(out, b.Block)
			}
		}
	}
	return out
}

// count adds a successful operation to the stats and the eviction
// counter.
func (t *Tree) count(op *access, reads, k int) {
	t.evictions += uint64(k)
	t.stats.BucketsWritten += uint64(len(op.due) + len(op.evict))
	t.stats.Reshuffles += uint64(len(op.due))
	if reads > 0 {
		t.stats.CachedHits += uint64(op.hits)
		t.stats.PathReads += uint64(reads)
		t.stats.MultiReads++
		t.stats.BucketsRead += uint64(op.readN)
	}
	if k > 0 {
		t.stats.Evictions++
		t.stats.EvictedPaths += uint64(k)
	}
}

// topAfter returns the blocks of the top buckets top once the read has
// taken its blocks out (taken: the read's new contents of some), each with
// room for Z.
func (t *Tree) topAfter(top []uint64, taken []TopBucket) [][]Block {
	kept := t.topKept(top)
	for _, tb := range taken {
		if i, ok := slices.BinarySearch(top, tb.Bucket); ok {
			kept[i] = append(kept[i][:0], tb.Blocks...)
		}
	}
	return kept
}

// mergeTop returns the top buckets of read changed by a read, updated by
// the eviction's contents evict, sorted by bucket.
func mergeTop(read, evict []TopBucket) []TopBucket {
	out := slices.Clone(evict)
	for _, tb := range read {
		if !slices.ContainsFunc(evict, func(e TopBucket) bool { return e.Bucket == tb.Bucket }) {
			out = append(out, tb)
		}
	}
	slices.SortFunc(out, func(a, b TopBucket) int { return cmp.Compare(a.Bucket, b.Bucket) })
	return out
}

// mergeSorted returns the sorted union of two sorted lists of distinct
// buckets.
func mergeSorted(a, b []uint64) []uint64 {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
