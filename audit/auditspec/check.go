package auditspec

import (
	"fmt"
	"math"
)

// DecisiveP is how clearly an injected leak must fail a statistical check:
// its p-value must be at most this, seven orders of magnitude below
// package audit's Significance, so that the leak fails by a wide margin
// and not at the edge of the critical value.
const DecisiveP = 1e-12

// Check is the verdict of one audit check on an adversary's view: a
// statistic, and the largest value a protocol that hides what the check
// looks for shows (with probability 1-Significance for a statistical
// check, always for an exact one). Package audit makes them.
type Check struct {
	Name     string
	Stat     float64
	Critical float64
	// P is the probability of a statistic at least Stat when nothing
	// leaks: the p-value of a statistical check; 1 or 0 for an exact one.
	P float64
	// Detail says what was measured, for logs and reports.
	Detail string
}

// Pass reports whether the statistic is within its critical value.
func (c Check) Pass() bool { return c.Stat <= c.Critical }

// Decisive reports whether the check fails far from its threshold: with a
// p-value of at most DecisiveP (an exact check that fails always does).
func (c Check) Decisive() bool { return !c.Pass() && c.P <= DecisiveP }

// Applicable reports whether the check tested anything: a statistical
// check with too few samples has an infinite critical value, which no
// statistic exceeds, and is shown as not applicable.
func (c Check) Applicable() bool { return !math.IsInf(c.Critical, 1) }

func (c Check) String() string {
	verdict := "pass"
	if !c.Pass() {
		verdict = "FAIL"
	}
	critical := fmt.Sprintf("%.4g", c.Critical)
	if !c.Applicable() {
		critical = "n/a"
	}
	s := fmt.Sprintf("%s: %s, statistic %.4g (critical %s, p = %.3g)", c.Name, verdict, c.Stat, critical, c.P)
	if c.Detail != "" {
		s += "; " + c.Detail
	}
	return s
}
