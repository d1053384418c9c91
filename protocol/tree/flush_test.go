package tree

import (
	"math/rand/v2"
	"testing"
)

// referenceFlush is the textbook level-by-level flush: from the leaf up,
// fill each bucket with up to z of the blocks that may go there. It
// returns how many blocks it leaves in the stash.
func referenceFlush(g Geometry, z int, leaf uint64, leaves []uint64) int {
	placed := make([]bool, len(leaves))
	left := len(leaves)
	for lvl := g.L; lvl >= 0; lvl-- {
		room := z
		for i, lf := range leaves {
			if room > 0 && !placed[i] && g.DeepestCommonLevel(leaf, lf) >= lvl {
				placed[i], room, left = true, room-1, left-1
			}
		}
	}
	return left
}

func TestFlushProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, L := range []int{1, 3, 6, 12} {
		g := Geometry{L: L}
		for _, z := range []int{1, 4} {
			f := NewFlusher(g, z)
			for range 300 {
				leaf := r.Uint64N(g.Leaves())
				n := r.IntN(z*(L+1) + 20)
				leaves := make([]uint64, n)
				for i := range leaves {
					leaves[i] = r.Uint64N(g.Leaves())
					if r.IntN(4) == 0 { // many blocks close to the path
						leaves[i] = leaf ^ r.Uint64N(4)&(g.Leaves()-1)
					}
				}
				levels := make([]int, n)
				stashed := f.Flush(leaf, leaves, levels)
				checkFlush(t, g, z, leaf, leaves, levels, stashed)
				if want := referenceFlush(g, z, leaf, leaves); stashed != want {
					t.Fatalf("L=%d z=%d: %d blocks stashed; the level-by-level flush stashes %d", L, z, stashed, want)
				}
			}
		}
	}
}

// checkFlush checks a placement: every placed block on its own path, no
// bucket over z, and no stashed block that could have gone somewhere.
func checkFlush(t *testing.T, g Geometry, z int, leaf uint64, leaves []uint64, levels []int, stashed int) {
	t.Helper()
	used := make([]int, g.L+1)
	n := 0
	for i, lvl := range levels {
		if lvl < 0 {
			n++
			continue
		}
		if !g.OnPath(g.BucketAt(leaf, lvl), leaves[i]) {
			t.Fatalf("block %d (leaf %d) placed at level %d of path %d, off its own path", i, leaves[i], lvl, leaf)
		}
		used[lvl]++
	}
	for lvl, u := range used {
		if u > z {
			t.Fatalf("level %d holds %d blocks; z = %d", lvl, u, z)
		}
	}
	if n != stashed {
		t.Fatalf("Flush reports %d stashed; levels say %d", stashed, n)
	}
	for i, lvl := range levels {
		if lvl >= 0 {
			continue
		}
		for l := 0; l <= g.DeepestCommonLevel(leaf, leaves[i]); l++ {
			if used[l] < z {
				t.Fatalf("block %d stashed though level %d on both paths has room", i, l)
			}
		}
	}
}

func TestFlushDeepestFirst(t *testing.T) {
	g := Geometry{L: 3}
	f := NewFlusher(g, 1)
	// Path 0, z=1. The blocks for leaf 0 may go down to level 3, the block
	// for leaf 1 to level 2, the block for leaf 7 only to the root. The
	// leaf-0 blocks take the deepest buckets (3 and 2, in input order), the
	// leaf-1 block the next one up, the leaf-7 block the root.
	leaves := []uint64{1, 0, 7, 0}
	levels := make([]int, 4)
	f.Flush(0, leaves, levels)
	want := []int{1, 3, 0, 2}
	for i := range want {
		if levels[i] != want[i] {
			t.Fatalf("levels = %v; want %v", levels, want)
		}
	}
	// A leaf outside the tree stays in the stash.
	if n := f.Flush(0, []uint64{g.Leaves()}, levels[:1]); n != 1 || levels[0] != -1 {
		t.Fatalf("block with leaf outside the tree: level %d, stashed %d", levels[0], n)
	}
}

func TestFlushAllocates(t *testing.T) {
	g := Geometry{L: 10}
	f := NewFlusher(g, 4)
	r := rand.New(rand.NewPCG(8, 8))
	leaves := make([]uint64, 60)
	for i := range leaves {
		leaves[i] = r.Uint64N(g.Leaves())
	}
	levels := make([]int, len(leaves))
	allocs := testing.AllocsPerRun(100, func() { f.Flush(r.Uint64N(g.Leaves()), leaves, levels) })
	if allocs != 0 {
		t.Fatalf("Flush allocates %.1f times per call once warm; want 0", allocs)
	}
}

// PlaceDeepest fills a path from the leaf up, z per bucket, then refuses.
func TestPlaceDeepest(t *testing.T) {
	g := Geometry{L: 3}
	buckets := make([][]Block, g.Buckets())
	const z, leaf = 2, 5
	for i := range z * (g.L + 1) {
		if !PlaceDeepest(g, buckets, z, leaf, Block{ID: BlockID{byte(i)}}) {
			t.Fatalf("block %d refused with room left on the path", i)
		}
		if want := g.BucketAt(leaf, g.L-i/z); len(buckets[want]) != i%z+1 {
			t.Fatalf("block %d did not go to the deepest bucket with room (level %d)", i, g.L-i/z)
		}
	}
	if PlaceDeepest(g, buckets, z, leaf, Block{}) {
		t.Fatal("a block was placed on a full path")
	}
}
