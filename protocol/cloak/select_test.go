package cloak

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMostRecentSelects(t *testing.T) {
	s := &store{rng: rand.New(rand.NewPCG(1, 2))}
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		n := 1 + r.IntN(60)
		s.slots = make([]slot, n)
		cand := make([]uint32, n)
		for i := range cand {
			cand[i] = uint32(i)
			s.slots[i].clientTS = uint64(r.IntN(1 + trial%7))
		}
		k := r.IntN(n + 1)
		s.mostRecent(cand, k)
		var top, all []uint64
		for i, a := range cand {
			all = append(all, s.slots[a].clientTS)
			if i < k {
				top = append(top, s.slots[a].clientTS)
			}
		}
		slices.Sort(all)
		slices.Reverse(all)
		slices.Sort(top)
		slices.Reverse(top)
		if !slices.Equal(top, all[:k]) {
			t.Fatalf("n=%d k=%d: front %v, want %v", n, k, top, all[:k])
		}
	}
}
