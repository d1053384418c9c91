package audit

import (
	"math"
	"math/rand/v2"
	"testing"
)

// walks follows keys keys, each accessed accesses times, whose next
// position next gives.
func walks(keys, accesses, positions int, next func(r *rand.Rand, key, prev int) int) [][]int {
	r := rand.New(rand.NewPCG(5, 6))
	out := make([][]int, keys)
	for k := range out {
		p := r.IntN(positions)
		for range accesses {
			out[k] = append(out[k], p)
			p = next(r, k, p)
		}
	}
	return out
}

// FollowKey passes blocks moved to fresh random positions, under a hot key
// and under many keys, and fails decisively a position derived from the
// key and one derived from the position before, by a step that keeps
// bins close or by one that mixes them.
func TestFollowKey(t *testing.T) {
	const positions = 1 << 12
	fresh := func(r *rand.Rand, _, _ int) int { return r.IntN(positions) }
	keyed := func(_ *rand.Rand, k, _ int) int { return (k * 2654435761) % positions }
	chained := func(_ *rand.Rand, _, p int) int { return (p*5 + 1) % positions }
	// A step of a full-period linear congruential generator: it mixes the
	// bins, so only the successors show it.
	mixed := func(_ *rand.Rand, _, p int) int {
		return int((uint64(p)*6364136223846793005 + 1442695040888963407) % positions)
	}
	for _, tc := range []struct {
		name     string
		walks    [][]int
		decisive int // how many of the checks must fail decisively
	}{
		{"fresh, hot key", walks(1, 3000, positions, fresh), 0},
		{"fresh, many keys", walks(1000, 4, positions, fresh), 0},
		{"keyed, hot key", walks(1, 3000, positions, keyed), 2},
		{"keyed, many keys", walks(1000, 4, positions, keyed), 2},
		{"from the previous position", walks(1000, 4, positions, chained), 1},
		{"from the previous position, mixed", walks(1000, 4, positions, mixed), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decisive := 0
			for _, c := range FollowKey(tc.name, tc.walks, positions, 8) {
				t.Log(c)
				switch {
				case c.Decisive():
					decisive++
				case !c.Pass():
					t.Errorf("failed, but not decisively: %v", c)
				}
			}
			if decisive < tc.decisive {
				t.Errorf("%d checks failed decisively, want at least %d", decisive, tc.decisive)
			}
			if tc.decisive == 0 && decisive > 0 {
				t.Errorf("fresh positions failed %d checks", decisive)
			}
		})
	}
}

// units writes units units of slots slots holding reals real blocks each,
// placed by place, and returns their placements.
func units(units, slots, reals int, place func(r *rand.Rand, slots, reals int) []int) []Placement {
	r := rand.New(rand.NewPCG(7, 8))
	var out []Placement
	for range units {
		for g, s := range place(r, slots, reals) {
			out = append(out, Placement{Slot: s, Slots: slots, Gathered: g, Of: reals})
		}
	}
	return out
}

// mixedUnits writes units of 4, 8 and 256 slots, a few real blocks in
// the small ones and 32 in the large ones, as a hierarchy of levels
// does, each permuted at random.
func mixedUnits() []Placement {
	r := rand.New(rand.NewPCG(13, 14))
	var out []Placement
	for range 3000 {
		slots := []int{4, 4, 8, 256}[r.IntN(4)]
		reals := min(slots/2, 32)
		for g, s := range r.Perm(slots)[:reals] {
			out = append(out, Placement{Slot: s, Slots: slots, Gathered: g, Of: reals})
		}
	}
	return out
}

// Placements pass a random permutation, of units of one size or of many,
// and fail decisively a unit written with its real blocks first, and one
// whose real blocks take random slots in the order they were gathered.
// (The units of many sizes failed a test of independence of one
// gathering x slot table, p = 1e-96.)
func TestPlacements(t *testing.T) {
	permuted := func(r *rand.Rand, slots, reals int) []int { return r.Perm(slots)[:reals] }
	first := func(_ *rand.Rand, _, reals int) []int {
		out := make([]int, reals)
		for i := range out {
			out[i] = i
		}
		return out
	}
	sorted := func(r *rand.Rand, slots, reals int) []int {
		mask := make([]bool, slots)
		for _, s := range r.Perm(slots)[:reals] {
			mask[s] = true
		}
		var out []int
		for s, m := range mask {
			if m {
				out = append(out, s)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		placements []Placement
		fails      string // the check that must fail decisively (others may too); "" for none
	}{
		{"permuted", units(300, 16, 8, permuted), ""},
		{"permuted, units of many sizes", mixedUnits(), ""},
		{"real blocks first", units(300, 16, 8, first), "uniform"},
		{"in gathering order", units(300, 16, 8, sorted), "independent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := Placements(tc.name, tc.placements, 8)
			for i, c := range checks {
				t.Log(c)
				switch {
				case tc.fails == [...]string{"uniform", "independent"}[i] && !c.Decisive():
					t.Errorf("passes or fails only narrowly: %v", c)
				case tc.fails == "" && !c.Pass():
					t.Errorf("a random permutation fails: %v", c)
				}
			}
		})
	}
}

// Choices pass a uniform choice among unread slots (of units of every
// size, so bins hold unequal shares) and fail decisively a read that takes
// the first unread slot one time in four.
func TestChoices(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var uniform, first []Choice
	for i := range 4000 {
		unread := 1 + r.IntN(12)
		uniform = append(uniform, Choice{Rank: r.IntN(unread), Unread: unread})
		c := Choice{Rank: r.IntN(unread), Unread: unread}
		if i%4 == 0 {
			c.Rank = 0
		}
		first = append(first, c)
	}
	if c := Choices("uniform", uniform, 8); !c.Pass() {
		t.Errorf("a uniform choice fails: %v", c)
	}
	if c := Choices("first", first, 8); !c.Decisive() {
		t.Errorf("a choice of the first unread slot one time in four passes: %v", c)
	}
}

// ChoicesByGroup passes uniform choices in groups, and fails decisively
// two groups, one that prefers the lower half of the unread slots and
// one the upper half, which pooled pass Choices.
func TestChoicesByGroup(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	var uniform, skewed [2][]Choice
	for range 4000 {
		for g := range 2 {
			const unread = 16
			uniform[g] = append(uniform[g], Choice{Rank: r.IntN(unread), Unread: unread})
			skewed[g] = append(skewed[g], Choice{Rank: g*unread/2 + r.IntN(unread/2), Unread: unread})
		}
	}
	if c := ChoicesByGroup("uniform", uniform[:], 8); !c.Pass() {
		t.Errorf("uniform choices fail: %v", c)
	}
	if c := Choices("skewed, pooled", append(skewed[0], skewed[1]...), 8); !c.Pass() {
		t.Errorf("the pooled groups were meant to pass: %v", c)
	}
	if c := ChoicesByGroup("skewed", skewed[:], 8); !c.Decisive() {
		t.Errorf("groups preferring opposite halves pass: %v", c)
	}
}

// A choice of a slot not among the unread ones (a doctored view's read
// of a slot read before) fails Choices exactly, and never panics.
func TestChoicesOutsideUnread(t *testing.T) {
	cs := []Choice{{Rank: 3, Unread: 14}, {Rank: 14, Unread: 14}}
	if c := Choices("outside", cs, 14); !c.Decisive() {
		t.Errorf("a choice outside the unread slots passes: %v", c)
	}
}

// Power agrees with the noncentral chi-square drawn as sums of squared
// normals, and MinEffect inverts it.
func TestPower(t *testing.T) {
	if got := NoncentralP(ChiSquareCritical(9, 0.01), 9, 0); math.Abs(got-0.01) > 1e-9 {
		t.Errorf("with no effect the tail is the central one: %g, want 0.01", got)
	}
	r := rand.New(rand.NewPCG(11, 12))
	const dof, lambda, draws = 9, 30.0, 40000
	crit := ChiSquareCritical(dof, Significance)
	above := 0
	for range draws {
		x := r.NormFloat64() + math.Sqrt(lambda)
		x *= x
		for range dof - 1 {
			z := r.NormFloat64()
			x += z * z
		}
		if x >= crit {
			above++
		}
	}
	got, want := Power(dof, lambda), float64(above)/draws
	if math.Abs(got-want) > 4*math.Sqrt(want*(1-want)/draws)+1e-3 {
		t.Errorf("power at lambda %v: %.4f computed, %.4f drawn", lambda, got, want)
	}
	w := MinEffect(1000, dof)
	if p := Power(dof, 1000*w*w); math.Abs(p-PowerLevel) > 1e-4 {
		t.Errorf("MinEffect(1000, %d) = %.4f gives power %.6f, want %v", dof, w, p, PowerLevel)
	}
}
