package audit

import (
	"fmt"
	"math"
)

// FollowKey checks where one key's block is found across its consecutive
// accesses. Each walk is one key followed through a run: the positions
// (tree and leaf, partition, physical address, place in a batch, each
// numbered in [0, positions)) at which storage saw the key's block
// accessed, in the order of the key's accesses. Which call was which
// key's is ground truth from the protocol's trace; the positions are
// what the Tap shows. A protocol that moves a block to a fresh random
// position at every access gives positions uniform and each independent
// of the one before, whatever the key and however often it is asked for.
// Four checks:
//
//   - uniform positions: every position of every walk, in bins
//     equal-width bins (Uniform);
//   - consecutive positions independent: the bins x bins table of each
//     position against the next of the same key (Independent; on the
//     overlapping pairs of a walk this is the test of a first-order
//     Markov chain against independent draws);
//   - same position again: consecutive positions of one key that are
//     equal, against the pairs/positions that chance gives (Excess);
//   - same successor again: of the pairs of steps (a position and the
//     next of the same key) that leave one position, those that go on
//     to one position, against pairs/positions (Excess). It sees what
//     the binned table cannot: a next position that is any function of
//     the one before, however well that function mixes the bins.
//
// A position derived from the key fails the last three under keys asked
// for three times or more each, and all but the second under a hot key;
// one derived from the previous position fails the last, and the second
// as well when the function keeps bins close.
func FollowKey(name string, walks [][]int, positions, bins int) []Check {
	name += ": "
	counts := make([]int, bins)
	table := make([][]int, bins)
	for i := range table {
		table[i] = make([]int, bins)
	}
	bin := func(p int) int { return p * bins / positions }
	pairs, same := 0, 0
	for _, w := range walks {
		for i, p := range w {
			counts[bin(p)]++
			if i == 0 {
				continue
			}
			table[bin(w[i-1])][bin(p)]++
			pairs++
			if p == w[i-1] {
				same++
			}
		}
	}
	u, udof := uniform(name+FollowUniform, counts)
	withPower(&u, sum(counts), udof)
	ind, idof := independent(name+FollowIndependent, table)
	withPower(&ind, pairs, idof)
	return []Check{u, ind,
		Excess(name+FollowSamePosition, same, float64(pairs)/float64(positions),
			fmt.Sprintf("%d of %d consecutive accesses of one key at the position before (%d positions, %d keys)", same, pairs, positions, len(walks))),
		sameSuccessor(name+FollowSameSuccessor, walks, positions)}
}

// FollowKey's checks, in the order it returns them: each is named by the
// caller's name, a colon and one of these.
const (
	FollowUniform       = "positions of one key uniform"
	FollowIndependent   = "consecutive positions of one key independent"
	FollowSamePosition  = "same position again"
	FollowSameSuccessor = "same successor again"
)

// sameSuccessor counts, among the pairs of steps of walks (a position and
// the next of the same walk) that leave one position, the pairs whose
// next positions are equal. When every next position is fresh, the later
// step of a pair goes on to the earlier one's next with probability
// 1/positions, whatever came before, so the count is close to Poisson
// with mean pairs/positions (Excess).
func sameSuccessor(name string, walks [][]int, positions int) Check {
	from := map[int]int{}     // position -> steps leaving it
	steps := map[[2]int]int{} // (position, next) -> steps
	for _, w := range walks {
		for i := 1; i < len(w); i++ {
			from[w[i-1]]++
			steps[[2]int{w[i-1], w[i]}]++
		}
	}
	pairs, same := 0, 0
	for _, n := range from {
		pairs += n * (n - 1) / 2
	}
	for _, n := range steps {
		same += n * (n - 1) / 2
	}
	return Excess(name, same, float64(pairs)/float64(positions),
		fmt.Sprintf("%d of %d pairs of steps from one position go on to one position (%d positions)", same, pairs, positions))
}

// Placement is where one real block landed in a unit written whole (a
// level, a bucket, a batch write-back) and where it stood in the order
// the unit's real blocks were gathered (read, requested, evicted).
type Placement struct {
	Slot, Slots  int // the slot it landed in, of the unit's Slots
	Gathered, Of int // its place in the gathering order, of the unit's Of real blocks
}

// Placements checks that a permuted unit hides where its real blocks sit:
// the slot a real block lands in is uniform over the unit's slots (Fit,
// in bins equal-width bins of each unit's slots), and independent of its
// place in the order the blocks were gathered: in each of bins bins of
// the gathering order, the slots are uniform over their units' slots
// (FitGroups; units with one real block have no order and are left
// out). The second is stratified rather than a test of independence of
// one gathering x slot table, because units of different sizes reach
// different bins (a unit of 4 slots never lands in an odd one of 8
// bins, one of 2 real blocks never reaches an odd row), which correlates
// rows with columns when they are pooled, however well each unit is
// permuted. A unit written unpermuted, or permuted only among its first
// slots, fails the first; one written in gathering order fails the
// second.
func Placements(name string, ps []Placement, bins int) []Check {
	observed, expected := make([]int, bins), make([]float64, bins)
	byOrder, byOrderExpected := make([][]int, bins), make([][]float64, bins)
	for i := range byOrder {
		byOrder[i], byOrderExpected[i] = make([]int, bins), make([]float64, bins)
	}
	for _, p := range ps {
		slot := p.Slot * bins / p.Slots
		observed[slot]++
		addUniform(expected, p.Slots)
		if p.Of > 1 {
			g := p.Gathered * bins / p.Of
			byOrder[g][slot]++
			addUniform(byOrderExpected[g], p.Slots)
		}
	}
	return []Check{Fit(name+": slots real blocks land in uniform", observed, expected),
		FitGroups(name+": slot independent of gathering order", byOrder, byOrderExpected)}
}

// Choice is one slot a read chose among the slots of a unit it had not
// read yet: the chosen slot's Rank among the Unread ones, in slot order.
type Choice struct{ Rank, Unread int }

// Choices checks that reads choose uniformly among the unread slots of a
// unit: the rank of each choice, in bins equal-width bins of its Unread,
// against the uniform choice (Fit). A read that takes the first unread
// dummy, or that prefers some slots, fails it. Choices with one slot
// left carry no information and are left out.
func Choices(name string, cs []Choice, bins int) Check {
	return ChoicesByGroup(name, [][]Choice{cs}, bins)
}

// ChoicesByGroup is Choices over groups of choices told apart by what
// was known before each choice (the unit's size, the kind of call):
// each group's ranks against the uniform choice, summed (FitGroups), so
// that a group that prefers low ranks cannot hide behind one that
// prefers high ones, as they can when pooled.
// A choice outside the unread slots (a read of a slot read before, which
// only a doctored or broken view shows) fails the check as an exact
// violation.
func ChoicesByGroup(name string, groups [][]Choice, bins int) Check {
	observed, expected := make([][]int, len(groups)), make([][]float64, len(groups))
	var outside []string
	for i, cs := range groups {
		observed[i], expected[i] = make([]int, bins), make([]float64, bins)
		for _, c := range cs {
			switch {
			case c.Rank < 0 || c.Rank >= c.Unread:
				outside = append(outside, fmt.Sprintf("rank %d among %d unread slots", c.Rank, c.Unread))
			case c.Unread >= 2:
				observed[i][c.Rank*bins/c.Unread]++
				addUniform(expected[i], c.Unread)
			}
		}
	}
	if len(outside) > 0 {
		return Exact(name, outside)
	}
	return FitGroups(name, observed, expected)
}

// addUniform adds to expected, in len(expected) equal-width bins of n
// slots, the probability of each bin under a uniform choice of one slot.
func addUniform(expected []float64, n int) {
	bins := len(expected)
	for j := range n {
		expected[j*bins/n] += 1 / float64(n)
	}
}

// Fit tests observed counts against the counts expected of them (with
// the same total): Pearson's chi-square goodness of fit, after pooling
// each run of neighbouring cells until it expects at least five samples
// (a remainder joins the last pooled cell). Its detail states the test's
// power (withPower).
func Fit(name string, observed []int, expected []float64) Check {
	return FitGroups(name, [][]int{observed}, [][]float64{expected})
}

// FitGroups is Fit over groups of counts, each with the same total as
// the counts expected of it: the sum of the groups' Pearson statistics,
// each after pooling as Fit does, with the sum of their degrees of
// freedom (a stratified goodness of fit).
func FitGroups(name string, observed [][]int, expected [][]float64) Check {
	stat, dof, n, cells := 0.0, 0, 0, 0
	for i := range observed {
		po, pe := poolExpected(observed[i], expected[i])
		for j := range po {
			d := float64(po[j]) - pe[j]
			stat += d * d / pe[j]
		}
		if len(po) > 0 {
			dof += len(po) - 1
		}
		n += sum(observed[i])
		cells += len(po)
	}
	detail := fmt.Sprintf("%d samples over %d pooled cells", n, cells)
	if len(observed) > 1 {
		detail += fmt.Sprintf(" in %d groups", len(observed))
	}
	c := chiSquareCheck(name, stat, dof, detail)
	withPower(&c, n, dof)
	return c
}

// poolExpected pools each run of neighbouring cells until it expects at
// least five samples; a remainder joins the last pooled cell.
func poolExpected(observed []int, expected []float64) ([]int, []float64) {
	var po []int
	var pe []float64
	o, e := 0, 0.0
	for i := range observed {
		o, e = o+observed[i], e+expected[i]
		if e >= 5 {
			po, pe = append(po, o), append(pe, e)
			o, e = 0, 0
		}
	}
	if len(po) > 0 {
		po[len(po)-1] += o
		pe[len(pe)-1] += e
	}
	return po, pe
}

// PowerLevel is the power every statistical check of this file states:
// the effect it names is caught with at least this probability.
const PowerLevel = 0.99

// withPower appends to c's detail the smallest effect its test, of dof
// degrees of freedom, catches with probability PowerLevel at Significance
// from n samples, as Cohen's
// w (the root of the summed squared differences of the cells'
// probabilities from those expected, each over the expected one; the
// test's statistic grows as n w^2).
func withPower(c *Check, n, dof int) {
	if dof < 1 || n == 0 {
		return
	}
	c.Detail += fmt.Sprintf("; power %.2f against an effect w >= %.3g", PowerLevel, MinEffect(n, dof))
}

// MinEffect is the smallest effect size w that a chi-square test with dof
// degrees of freedom on n samples detects at Significance with
// probability PowerLevel: the w whose noncentrality n w^2 gives a
// noncentral chi-square above the critical value with that probability.
func MinEffect(n, dof int) float64 {
	crit := ChiSquareCritical(dof, Significance)
	power := func(lambda float64) float64 { return NoncentralP(crit, dof, lambda) }
	lo, hi := 0.0, 1.0
	for power(hi) < PowerLevel {
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1e-4*hi { // w to within 0.005%, far finer than it is shown
		mid := (lo + hi) / 2
		if power(mid) < PowerLevel {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Sqrt(hi / float64(n))
}

// Power is the probability that a chi-square test with dof degrees of
// freedom rejects at Significance when its statistic is noncentral
// chi-square with noncentrality lambda (what an effect w on n samples
// gives with lambda = n w^2).
func Power(dof int, lambda float64) float64 {
	return NoncentralP(ChiSquareCritical(dof, Significance), dof, lambda)
}

// NoncentralP is the probability that a noncentral chi-square variable
// with dof degrees of freedom and noncentrality lambda is at least stat:
// the Poisson(lambda/2) mixture of central chi-square tails with dof+2j
// degrees of freedom.
func NoncentralP(stat float64, dof int, lambda float64) float64 {
	half := lambda / 2
	last := int(half + 12*math.Sqrt(half) + 30)
	p := 0.0
	for j := 0; j <= last; j++ {
		lg, _ := math.Lgamma(float64(j) + 1)
		w := math.Exp(-half + float64(j)*math.Log(half) - lg)
		if half == 0 {
			w = 0
			if j == 0 {
				w = 1
			}
		}
		p += w * ChiSquareP(stat, dof+2*j)
	}
	return min(p, 1)
}
