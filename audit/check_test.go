package audit

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ChiSquareP is the inverse of ChiSquareCritical, and matches tables.
func TestChiSquareP(t *testing.T) {
	for _, dof := range []int{1, 3, 15, 63, 255} {
		for _, p := range []float64{0.01, 0.001, Significance, DecisiveP} {
			crit := ChiSquareCritical(dof, p)
			if got := ChiSquareP(crit, dof); math.Abs(got-p)/p > 1e-6 {
				t.Errorf("ChiSquareP(ChiSquareCritical(%d, %g)) = %g", dof, p, got)
			}
		}
	}
	// Tables: 3 degrees of freedom, p = 0.001: 16.27.
	if crit := ChiSquareCritical(3, 0.001); math.Abs(crit-16.27) > 0.01 {
		t.Errorf("ChiSquareCritical(3, 0.001) = %.3f, want 16.27", crit)
	}
}

// trials runs n checks of draws from r and returns how many failed.
func trials(n int, check func(r *rand.Rand) Check) (failed int, worst Check) {
	r := rand.New(rand.NewPCG(7, 7))
	worst.P = 2
	for range n {
		c := check(r)
		if !c.Pass() {
			failed++
		}
		if c.P < worst.P {
			worst = c
		}
	}
	return failed, worst
}

// Each statistical check passes on samples of what it tests for (100
// trials, none of which should fail at Significance = 1e-5), and rejects
// a moderate departure from it decisively.
func TestChecksSeparate(t *testing.T) {
	const n = 20000
	uniform := func(r *rand.Rand, skew bool) []int {
		c := make([]int, 64)
		for i := range n {
			if skew && i%10 == 0 {
				c[3]++ // a tenth of the samples on one cell
			} else {
				c[r.IntN(64)]++
			}
		}
		return c
	}
	geometric := func(r *rand.Rand, p float64) []int {
		var h Histogram
		for range n / 4 {
			v := 0
			for r.Float64() > p {
				v++
			}
			h.Add(v)
		}
		return h.Counts
	}
	table := func(r *rand.Rand, dependent bool) [][]int {
		tb := [][]int{make([]int, 8), make([]int, 8), make([]int, 8), make([]int, 8)}
		for range n {
			row, col := r.IntN(4), r.IntN(8)
			if dependent && r.IntN(10) == 0 {
				col = 2 * row // a tenth of the samples tie column to row
			}
			tb[row][col]++
		}
		return tb
	}
	for _, tc := range []struct {
		name        string
		null, leaky func(r *rand.Rand) Check
	}{
		{"Uniform",
			func(r *rand.Rand) Check { return Uniform("u", uniform(r, false)) },
			func(r *rand.Rand) Check { return Uniform("u", uniform(r, true)) }},
		{"Homogeneous",
			func(r *rand.Rand) Check { return Homogeneous("h", geometric(r, 0.3), geometric(r, 0.3)) },
			func(r *rand.Rand) Check { return Homogeneous("h", geometric(r, 0.3), geometric(r, 0.36)) }},
		{"Independent",
			func(r *rand.Rand) Check { return Independent("i", table(r, false)) },
			func(r *rand.Rand) Check { return Independent("i", table(r, true)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if failed, worst := trials(100, tc.null); failed > 0 {
				t.Errorf("%d of 100 samples of the null hypothesis failed; worst: %v", failed, worst)
			}
			if c := tc.leaky(rand.New(rand.NewPCG(1, 2))); !c.Decisive() {
				t.Errorf("a departure was not rejected decisively: %v", c)
			} else {
				t.Log(c)
			}
		})
	}
}

// Homogeneous pools sparse cells, so a long thin tail does not inflate
// the statistic; pool keeps every sample.
func TestPool(t *testing.T) {
	a, b := []int{50, 40, 3, 2, 1, 0, 1, 0, 0, 1}, []int{48, 41, 4, 1, 0, 2, 0, 1, 1, 0}
	pa, pb := pool(a, b)
	if sum(pa) != sum(a) || sum(pb) != sum(b) {
		t.Fatalf("pool lost samples: %v %v", pa, pb)
	}
	for i := range pa {
		if pa[i]+pb[i] < minPooled {
			t.Fatalf("pooled cell %d holds %d samples: %v %v", i, pa[i]+pb[i], pa, pb)
		}
	}
	if c := Homogeneous("tail", a, b); !c.Pass() {
		t.Fatalf("near-identical histograms rejected: %v", c)
	}
}

// A textbook 2x2 table: rows (30, 10) and (10, 30) expect 20 in every
// cell, so the statistic is 4 * 10^2 / 20 = 20 with one degree of freedom.
func TestIndependentKnown(t *testing.T) {
	c := Independent("2x2", [][]int{{30, 10}, {10, 30}})
	if math.Abs(c.Stat-20) > 1e-9 || math.Abs(c.Critical-ChiSquareCritical(1, Significance)) > 1e-9 {
		t.Fatalf("%v; want statistic 20 with 1 degree of freedom", c)
	}
	if c := Independent("empty", [][]int{{0, 0}, {0, 0}}); c.Applicable() {
		t.Fatalf("%v; an empty table tests nothing", c)
	}
}

// A table with no samples, or with one row or one column holding them
// all, tests nothing: it is not applicable.
func TestIndependentEmpty(t *testing.T) {
	for _, table := range [][][]int{{{0, 0}, {0, 0}}, {{3, 4}, {0, 0}}, {{0, 5}, {0, 7}}} {
		if c := Independent("degenerate", table); c.Applicable() {
			t.Errorf("%v: %v; want not applicable", table, c)
		}
	}
}

// Excess's tail is the Poisson tail: P(X >= 1) = 1 - e^-lambda, and the
// critical count is the last whose tail is above Significance.
func TestExcess(t *testing.T) {
	if got, want := poissonAtLeast(1, 0.5), 1-math.Exp(-0.5); math.Abs(got-want) > 1e-12 {
		t.Fatalf("P(X >= 1) = %v, want %v", got, want)
	}
	for _, lambda := range []float64{0.01, 1, 4.5, 100} {
		c := Excess("e", 0, lambda, "")
		k := int(c.Critical)
		if poissonAtLeast(k, lambda) <= Significance || poissonAtLeast(k+1, lambda) > Significance {
			t.Errorf("lambda %v: critical %d does not bound the tail at %g", lambda, k, Significance)
		}
	}
	if c := Excess("e", 30, 4.5, ""); !c.Decisive() {
		t.Fatalf("30 events where 4.5 are expected: %v; want a decisive failure", c)
	}
}

// An exact check passes with no violations only, and names the first.
func TestExact(t *testing.T) {
	if c := Exact("x", nil); !c.Pass() || c.P != 1 {
		t.Fatalf("no violations: %v", c)
	}
	c := Exact("x", []string{"a", "b", "c", "d", "e"})
	if c.Pass() || !c.Decisive() || c.Stat != 5 || c.Detail != "a; b; c; and 2 more" {
		t.Fatalf("five violations: %v", c)
	}
}
