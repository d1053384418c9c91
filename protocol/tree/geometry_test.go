package tree

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNewGeometry(t *testing.T) {
	for _, tc := range []struct{ capacity, L int }{
		{-5, 1}, {0, 1}, {1, 1}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {64, 6}, {65, 7},
		{1000, 10}, {1024, 10}, {1025, 11}, {1 << 16, 16}, {1<<16 + 1, 17},
	} {
		g := NewGeometry(tc.capacity)
		if g.L != tc.L {
			t.Errorf("NewGeometry(%d).L = %d; want %d", tc.capacity, g.L, tc.L)
		}
		if tc.capacity > 0 && g.Leaves() < uint64(tc.capacity) {
			t.Errorf("NewGeometry(%d) has %d leaves; want at least the capacity", tc.capacity, g.Leaves())
		}
		if g.Buckets() != 2*g.Leaves()-1 {
			t.Errorf("L=%d: %d buckets for %d leaves; want 2*leaves-1", g.L, g.Buckets(), g.Leaves())
		}
	}
}

func TestPath(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, L := range []int{1, 2, 5, 10, 20, 40} {
		g := Geometry{L: L}
		dst := []uint64{99, 98, 97} // junk to be overwritten
		for range 200 {
			leaf := r.Uint64N(g.Leaves())
			p := g.Path(leaf, dst)
			if len(p) != L+1 || p[0] != 0 {
				t.Fatalf("L=%d: Path(%d) = %v; want L+1 buckets from the root", L, leaf, p)
			}
			for lvl, b := range p {
				if g.Level(b) != lvl || g.BucketAt(leaf, lvl) != b || !g.OnPath(b, leaf) {
					t.Fatalf("L=%d leaf %d: bucket %d at level %d: Level %d, BucketAt %d, OnPath %v",
						L, leaf, b, lvl, g.Level(b), g.BucketAt(leaf, lvl), g.OnPath(b, leaf))
				}
				if lvl > 0 && b != 2*p[lvl-1]+1 && b != 2*p[lvl-1]+2 {
					t.Fatalf("L=%d: Path(%d) = %v: %d is not a child of %d", L, leaf, p, b, p[lvl-1])
				}
			}
			if got, ok := g.LeafOf(p[L]); !ok || got != leaf {
				t.Fatalf("L=%d: LeafOf(%d) = %d, %v; want %d", L, p[L], got, ok, leaf)
			}
			if _, ok := g.LeafOf(p[L-1]); ok {
				t.Fatalf("L=%d: LeafOf(%d), an inner bucket, reports a leaf", L, p[L-1])
			}
			dst = p
		}
	}
}

// DeepestCommonLevel and OnPath agree with comparing Path slices.
func TestDeepestCommonLevelProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, L := range []int{1, 3, 8, 16, 33} {
		g := Geometry{L: L}
		for range 500 {
			a, b := r.Uint64N(g.Leaves()), r.Uint64N(g.Leaves())
			if r.IntN(8) == 0 {
				b = a
			}
			pa, pb := g.Path(a, nil), g.Path(b, nil)
			want := -1
			for lvl := range pa {
				if pa[lvl] == pb[lvl] {
					want = lvl
				}
			}
			if got := g.DeepestCommonLevel(a, b); got != want {
				t.Fatalf("L=%d: DeepestCommonLevel(%d, %d) = %d; paths %v and %v share up to level %d", L, a, b, got, pa, pb, want)
			}
			bucket := r.Uint64N(g.Buckets())
			if got, want := g.OnPath(bucket, a), slices.Contains(pa, bucket); got != want {
				t.Fatalf("L=%d: OnPath(%d, %d) = %v; path %v", L, bucket, a, got, pa)
			}
		}
		if g.OnPath(g.Buckets(), 0) || g.OnPath(0, g.Leaves()) {
			t.Errorf("L=%d: OnPath accepts a bucket or leaf outside the tree", L)
		}
	}
}

func TestReverseLexLeaf(t *testing.T) {
	g := Geometry{L: 3}
	want := []uint64{0, 4, 2, 6, 1, 5, 3, 7, 0, 4}
	for i, w := range want {
		if got := g.ReverseLexLeaf(uint64(i)); got != w {
			t.Errorf("L=3: ReverseLexLeaf(%d) = %d; want %d", i, got, w)
		}
	}
	for _, L := range []int{1, 2, 7, 12} {
		g := Geometry{L: L}
		for _, base := range []uint64{0, g.Leaves(), 5 * g.Leaves()} {
			seen := make([]bool, g.Leaves())
			for i := range g.Leaves() {
				leaf := g.ReverseLexLeaf(base + i)
				if leaf >= g.Leaves() || seen[leaf] {
					t.Fatalf("L=%d: ReverseLexLeaf(%d) = %d: outside the tree or repeated within one round", L, base+i, leaf)
				}
				seen[leaf] = true
			}
		}
	}
}

// Union holds every bucket of every path exactly once, root first, and
// nothing else.
func TestUnion(t *testing.T) {
	g := Geometry{L: 4}
	leaves := []uint64{9, 3, 9, 15, 0}
	got := g.Union(leaves, nil)
	want := map[uint64]bool{}
	for _, leaf := range leaves {
		for _, b := range g.Path(leaf, nil) {
			want[b] = true
		}
	}
	if len(got) != len(want) {
		t.Fatalf("union has %d buckets, want %d distinct: %v", len(got), len(want), got)
	}
	for i, b := range got {
		if !want[b] {
			t.Fatalf("bucket %d is on none of the paths", b)
		}
		if i > 0 && (g.Level(got[i-1]) > g.Level(b) || got[i-1] >= b) {
			t.Fatalf("union not ordered by level then bucket: %v", got)
		}
	}
	if got := g.Union([]uint64{7}, nil); !slices.Equal(got, g.Path(7, nil)) {
		t.Fatalf("union of one path is %v, want the path %v", got, g.Path(7, nil))
	}
}
