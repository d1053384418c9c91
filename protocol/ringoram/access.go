package ringoram

import (
	"cmp"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// access is an operation planned before any slot is read: which slots
// its Reads take and what it will rewrite. Indices are into Union, the
// buckets below the top of the read's and the eviction's paths. Its
// fields are exported for the Tree's image (image.go).
type access struct {
	K       int // paths evicted
	ReadN   int // buckets of the read's paths below the top
	Union   []uint64
	Metas   []meta // the metadata as the operation leaves it
	Checked []meta // the metadata the slots read are checked against
	Results []ReadResult
	Taken   []tree.Block // blocks of the read taken out so far
	Hits    int          // of them, from the top
	Top     []TopBucket  // top buckets the read took blocks from, as it leaves them
	// TopLater is set when the read takes its blocks from the top once
	// its slots are in (takeTopNow), not when it is planned: an image of
	// an earlier build, which took them at Start, leaves it unset.
	TopLater bool

	Reads   []slotRead // the multi-path read's slots
	Owner   []int32    // per read: the request it serves, or -1
	Due     []int      // buckets reshuffled early
	Shuffle []slotRead // Z slots of each bucket due
	Evicted []uint64   // the eviction's paths' buckets, top included
	Evict   []int      // the eviction's buckets below the top
	EvReads []slotRead // Z slots of each of them
}

// paths plans what an operation reads before its metadata is known: the
// union of the read's and the eviction's paths below the top. Which
// blocks the top levels serve is left to takeTopNow: no slot choice
// depends on it, since a block the top holds is live in no stored bucket.
func (t *Tree) paths(reqs []PathRead, k int) *access {
	op := &access{K: k, Results: make([]ReadResult, len(reqs)), TopLater: true}
	leaves := make([]uint64, len(reqs))
	for i, r := range reqs {
		leaves[i] = r.Leaf
	}
	_, read := t.top.split(t.g.Union(leaves, nil))
	op.ReadN = len(read)
	var evict []uint64
	if k > 0 {
		op.Evicted = t.g.Union(t.EvictionLeaves(k), nil)
		_, evict = t.top.split(op.Evicted)
	}
	op.Union = mergeSorted(read, evict)
	for _, b := range evict {
		op.Evict = append(op.Evict, index(op.Union, b))
	}
	return op
}

// slots chooses every slot the operation reads once the metadata of its
// union is known: the multi-path read's (pathSlots), the early
// reshuffles' and the eviction's (realSlotsOf).
func (t *Tree) slots(op *access, reqs []PathRead, metas []meta) {
	op.Reads, op.Owner = t.pathSlots(reqs, op.Union, metas)
	op.Checked = t.copyMetas(metas)
	for _, r := range op.Reads {
		metas[r.I].consume(r.Slot)
	}
	op.Metas = metas
	for _, i := range t.due(metas) {
		if !slices.Contains(op.Evict, i) {
			op.Due = append(op.Due, i)
		}
	}
	op.Shuffle = t.realSlotsOf(op.Union, metas, op.Due)
	op.EvReads = t.realSlotsOf(op.Union, metas, op.Evict)
}

// rewritten returns the buckets the operation rewrites whole, sorted:
// those reshuffled early and its eviction's below the top.
func (op *access) rewritten() []uint64 {
	out := make([]uint64, 0, len(op.Due)+len(op.Evict))
	for _, i := range slices.Concat(op.Due, op.Evict) {
		out = append(out, op.Union[i])
	}
	slices.Sort(out)
	return out
}

// lists returns the operation's slot Reads: the multi-path read's slots
// and then its reshuffles', and the eviction's, each when there is one.
func (op *access) lists() [][]slotRead {
	var lists [][]slotRead
	if len(op.Results) > 0 {
		lists = append(lists, slices.Concat(op.Reads, op.Shuffle))
	}
	if len(op.Evict) > 0 {
		lists = append(lists, op.EvReads)
	}
	return lists
}

// takeTopNow serves the requests whose block a top bucket on their path
// holds, once the operation's slots are in: the top is then as every
// operation before this one left it, whether or not they were still in
// progress when it was planned.
func (t *Tree) takeTopNow(op *access, reqs []PathRead) {
	if !op.TopLater {
		return
	}
	op.Taken, op.Top = t.takeTop(reqs, op.Results)
	op.Hits, op.TopLater = len(op.Taken), false
}

// answer hands each request the block its slot held.
func (op *access) answer(got []tree.Block) []ReadResult {
	if len(op.Results) == 0 {
		return nil
	}
	for j := range op.Reads {
		if op.Owner[j] >= 0 {
			op.Results[op.Owner[j]] = ReadResult{Block: got[j], Found: true}
			op.Taken = append(op.Taken, got[j])
		}
	}
	return op.Results
}

// rewrites plans the operation's Write from the slots read (got, as
// lists): new metadata for every bucket of the union, the buckets due
// laid out afresh with their live blocks, and the eviction's buckets with
// the blocks placed in them (place). It returns where each block offered
// went and the operation's Change.
func (t *Tree) rewrites(op *access, got [][]tree.Block, blocks []Block) ([]int64, Change, []bucketWrite, error) {
	c := Change{Taken: op.Taken, Top: op.Top}
	var shuffled []tree.Block
	if len(op.Results) > 0 {
		shuffled = got[0][len(op.Reads):]
	}
	kept := t.keptBlocks(op.Union, op.Metas, op.Due, op.Shuffle, shuffled)
	ws := t.reshuffle(op.Union, op.Metas, op.Due, kept)
	if len(op.Evict) == 0 {
		return nil, c, ws, nil
	}
	top, _ := t.top.split(op.Evicted)
	inTop := t.topAfter(top, op.Top)
	read := t.keptBlocks(op.Union, op.Metas, op.Evict, op.EvReads, got[len(got)-1])
	contents, where, err := t.place(op.Evicted, slices.Concat(inTop, read), blocks)
	if err != nil {
		return nil, c, nil, err
	}
	n := t.p.slots()
	slots := make([]*tree.Block, len(op.Evict)*n)
	for j, i := range op.Evict {
		ws[i] = t.rewrite(op.Union[i], &op.Metas[i], contents[len(top)+j], slots[j*n:(j+1)*n])
	}
	c.Evicted = op.K
	for j, b := range where {
		if b >= 0 {
			c.Placed = append(c.Placed, Placement{ID: blocks[j].Block.ID, Bucket: uint64(b), Leaf: blocks[j].Leaf, Value: blocks[j].Block.Value})
		}
	}
	c.Top = mergeTop(op.Top, t.topWrites(top, contents[:len(top)]))
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
	t.stats.BucketsWritten += uint64(len(op.Due) + len(op.Evict))
	t.stats.Reshuffles += uint64(len(op.Due))
	if reads > 0 {
		t.stats.CachedHits += uint64(op.Hits)
		t.stats.PathReads += uint64(reads)
		t.stats.MultiReads++
		t.stats.BucketsRead += uint64(op.ReadN)
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
