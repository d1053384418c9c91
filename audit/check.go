package audit

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/gonum/mathext"

	"github.com/oblivkv/oblivkv/audit/auditspec"
)

// Significance is the false-alarm rate of every statistical check: a
// protocol that hides what a check looks for fails it with this
// probability. It is small because the default test run makes dozens of
// such checks on protocols that must pass them all.
const Significance = 1e-5

// DecisiveP is how clearly an injected leak must fail a statistical check
// (auditspec.DecisiveP: its p-value at most this, seven orders of
// magnitude below Significance).
const DecisiveP = auditspec.DecisiveP

// Check is the verdict of one check (auditspec.Check: a statistic, its
// critical value and its p-value), the type a protocol's registered
// analysis returns.
type Check = auditspec.Check

// Exact is the check of an exact rule: its statistic is the number of
// violations, and it passes only with none.
func Exact(name string, violations []string) Check {
	c := Check{Name: name, Stat: float64(len(violations)), P: 1}
	if len(violations) > 0 {
		c.P = 0
		c.Detail = strings.Join(violations[:min(len(violations), 3)], "; ")
		if len(violations) > 3 {
			c.Detail += fmt.Sprintf("; and %d more", len(violations)-3)
		}
	}
	return c
}

// ExactErr is Exact with err's message as its one violation, none when
// err is nil: the check of a rule a parser or checker reports as an error.
func ExactErr(name string, err error) Check {
	if err != nil {
		return Exact(name, []string{err.Error()})
	}
	return Exact(name, nil)
}

// chiSquareCheck is the check of a chi-square statistic with dof degrees
// of freedom.
func chiSquareCheck(name string, stat float64, dof int, detail string) Check {
	if dof < 1 {
		return Check{Name: name, Critical: math.Inf(1), P: 1, Detail: "too few samples to test: " + detail}
	}
	return Check{Name: name, Stat: stat, Critical: ChiSquareCritical(dof, Significance),
		P: ChiSquareP(stat, dof), Detail: fmt.Sprintf("chi-square, %d degrees of freedom; %s", dof, detail)}
}

// ChiSquareP is the probability that a chi-square variable with dof
// degrees of freedom is at least stat (the upper tail).
func ChiSquareP(stat float64, dof int) float64 {
	if stat <= 0 {
		return 1
	}
	return mathext.GammaIncRegComp(float64(dof)/2, stat/2)
}

// Uniform tests counts against the uniform distribution over their cells:
// Pearson's chi-square with len(counts)-1 degrees of freedom. Each cell
// should expect five samples or more.
func Uniform(name string, counts []int) Check {
	c, _ := uniform(name, counts)
	return c
}

// uniform is Uniform, and the test's degrees of freedom.
func uniform(name string, counts []int) (Check, int) {
	stat, dof := ChiSquareUniform(counts)
	return chiSquareCheck(name, stat, dof, fmt.Sprintf("%d samples over %d cells", sum(counts), len(counts))), dof
}

// minPooled is the fewest samples of both histograms together that
// Homogeneous lets a pooled cell hold: about five expected in each when
// the samples are of similar size, the usual condition for the chi-square
// approximation.
const minPooled = 10

// Homogeneous tests whether two histograms over the same ordered cells
// (a[i] and b[i] count the same value) are draws of one distribution: the
// two-sample chi-square test of homogeneity, after pooling each run of
// neighbouring cells until it holds minPooled samples of both together (a
// remainder joins the last pooled cell).
func Homogeneous(name string, a, b []int) Check {
	pa, pb := pool(a, b)
	stat, dof := ChiSquareTwoSample(pa, pb)
	return chiSquareCheck(name, stat, dof, fmt.Sprintf("%d against %d samples over %d pooled cells", sum(a), sum(b), len(pa)))
}

// pool merges neighbouring cells of a and b (padded to one length) as
// Homogeneous describes.
func pool(a, b []int) ([]int, []int) {
	n := max(len(a), len(b))
	at := func(h []int, i int) int {
		if i < len(h) {
			return h[i]
		}
		return 0
	}
	var pa, pb []int
	ca, cb := 0, 0
	for i := range n {
		ca, cb = ca+at(a, i), cb+at(b, i)
		if ca+cb >= minPooled {
			pa, pb = append(pa, ca), append(pb, cb)
			ca, cb = 0, 0
		}
	}
	if ca+cb > 0 {
		if len(pa) == 0 {
			return []int{ca}, []int{cb}
		}
		pa[len(pa)-1] += ca
		pb[len(pb)-1] += cb
	}
	return pa, pb
}

// Independent tests whether the rows and the columns of a contingency
// table are independent: Pearson's chi-square test of independence, with
// (rows-1)(columns-1) degrees of freedom over the rows and columns that
// hold samples. Bins should be chosen so that cells expect five samples
// or more.
func Independent(name string, table [][]int) Check {
	c, _ := independent(name, table)
	return c
}

// independent is Independent, and the test's degrees of freedom.
func independent(name string, table [][]int) (Check, int) {
	rows, cols := make([]float64, len(table)), []float64(nil)
	total := 0.0
	for i, row := range table {
		for j, c := range row {
			for len(cols) <= j {
				cols = append(cols, 0)
			}
			rows[i] += float64(c)
			cols[j] += float64(c)
			total += float64(c)
		}
	}
	stat := 0.0
	for i, row := range table {
		for j := range cols {
			if rows[i] == 0 || cols[j] == 0 {
				continue
			}
			var o float64
			if j < len(row) {
				o = float64(row[j])
			}
			e := rows[i] * cols[j] / total
			stat += (o - e) * (o - e) / e
		}
	}
	dof := max(nonzero(rows)-1, 0) * max(nonzero(cols)-1, 0) // an empty table tests nothing
	return chiSquareCheck(name, stat, dof, fmt.Sprintf("%d samples in a %dx%d table", int(total), len(rows), len(cols))), dof
}

// Excess tests a count of chance events against the number expected when
// nothing leaks: the count is taken as Poisson with mean expected, and
// Critical is the largest count whose upper tail is above Significance.
func Excess(name string, observed int, expected float64, detail string) Check {
	crit := 0
	for poissonAtLeast(crit+1, expected) > Significance {
		crit++
	}
	return Check{Name: name, Stat: float64(observed), Critical: float64(crit), P: poissonAtLeast(observed, expected),
		Detail: fmt.Sprintf("%.2f expected by chance; %s", expected, detail)}
}

// poissonAtLeast is P(X >= k) for X Poisson with mean lambda: the
// regularized lower incomplete gamma function P(k, lambda), exact in the
// far tail where 1 - CDF would round to zero.
func poissonAtLeast(k int, lambda float64) float64 {
	if k <= 0 {
		return 1
	}
	if lambda <= 0 {
		return 0
	}
	return mathext.GammaIncReg(float64(k), lambda)
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

func nonzero(xs []float64) int {
	n := 0
	for _, x := range xs {
		if x > 0 {
			n++
		}
	}
	return n
}
