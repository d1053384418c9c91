package tree

// Flusher computes Path ORAM's greedy flush (TaoStore Sec. IV-A, step 2
// "Flushing"): every block on the flushed path or in the stash goes to the
// lowest (deepest) non-full bucket on the path that intersects its own
// assigned path; blocks that fit nowhere stay in the stash.
//
// Blocks are placed in order of how deep they could go, deepest first, each
// in the deepest bucket with room at or above its deepest common level with
// the path. This places as many blocks as any placement can, and keeps the
// deep buckets for the blocks that can use them.
//
// A Flusher keeps its scratch space between calls, so flushing allocates
// nothing once warm. It only decides levels; moving blocks is the caller's
// (Path ORAM rebuilds the path's buckets, TaORAM the path within its local
// subtree). It is not safe for concurrent use.
type Flusher struct {
	g     Geometry
	z     int
	used  []int   // per level: blocks placed so far
	start []int   // per deepest common level: start of its run in order
	order []int32 // block indices sorted by deepest common level, deepest first
	dcl   []int8  // per block: deepest common level with the path
}

// NewFlusher returns a Flusher for tree g with z slots per bucket.
func NewFlusher(g Geometry, z int) *Flusher {
	return &Flusher{g: g, z: z, used: make([]int, g.L+1), start: make([]int, g.L+2)}
}

// Flush decides where each block goes when the path to leaf is flushed:
// leaves[i] is block i's assigned leaf, and levels[i] receives the level of
// the bucket on the path that block i goes to, or -1 if it stays in the
// stash. It returns the number of blocks left in the stash. levels must be
// as long as leaves.
func (f *Flusher) Flush(leaf uint64, leaves []uint64, levels []int) (stashed int) {
	if len(levels) != len(leaves) {
		panic("tree: Flusher.Flush: levels and leaves differ in length")
	}
	f.sort(leaf, leaves)
	clear(f.used)
	for _, i := range f.order {
		levels[i] = f.place(int(f.dcl[i]))
		if levels[i] < 0 {
			stashed++
		}
	}
	return stashed
}

// sort fills f.order with the block indices by deepest common level with
// the path to leaf, deepest first (a counting sort; stable).
func (f *Flusher) sort(leaf uint64, leaves []uint64) {
	n := len(leaves)
	if cap(f.order) < n {
		f.order, f.dcl = make([]int32, n), make([]int8, n)
	}
	f.order, f.dcl = f.order[:n], f.dcl[:n]
	L := f.g.L
	count := f.start
	clear(count)
	for i, lf := range leaves {
		d := -1 // a leaf outside the tree: stays in the stash
		if lf < f.g.Leaves() {
			d = f.g.DeepestCommonLevel(leaf, lf)
		}
		f.dcl[i] = int8(d)
		count[L-d]++ // runs ordered by L-d: deepest first, -1 last
	}
	pos := 0
	for k, c := range count {
		count[k] = pos
		pos += c
	}
	for i := range leaves {
		k := L - int(f.dcl[i])
		f.order[count[k]] = int32(i)
		count[k]++
	}
}

// place returns the deepest level at or above d with room and takes a slot
// there, or -1.
func (f *Flusher) place(d int) int {
	for ; d >= 0; d-- {
		if f.used[d] < f.z {
			f.used[d]++
			return d
		}
	}
	return -1
}

// PlaceDeepest puts blk, assigned to leaf, in the deepest bucket of leaf's
// path in g holding fewer than z blocks, as a flush would (Sec. IV-A step
// 2), and reports false when the whole path is full (the block belongs in
// the stash). buckets is indexed by bucket number. It is how a bulk load
// lays out its initial tree, whatever a bucket's blocks are.
func PlaceDeepest[B any](g Geometry, buckets [][]B, z int, leaf uint64, blk B) bool {
	for lvl := g.L; lvl >= 0; lvl-- {
		if b := g.BucketAt(leaf, lvl); len(buckets[b]) < z {
			buckets[b] = append(buckets[b], blk)
			return true
		}
	}
	return false
}
