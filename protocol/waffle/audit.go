package waffle

import (
	"fmt"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/kv"
)

// auditSpec is Waffle's registration with `oblivkv audit`: its clients
// run freely, and analyse makes its checks of storage's view.
var auditSpec = &auditspec.Spec{
	Prefixes: []string{ObjectPrefix},
	Analyse:  analyse,
	Plots:    map[string]auditspec.Plot{"alpha": {Title: "Waffle alpha: batches from an id's write to its read", YLabel: "ids"}},
}

// positionBins is the number of bins of the positions and ages the audit
// tests for independence (audit.PositionChecks).
const positionBins = 5

// analyse makes Waffle's checks of one run: alpha within Theorem 7.1's
// bound (Waffle Sec. 7), fresh ids, ids that share no more prefixes than
// random ones, B addresses per batch call (Sec. 6.2: f_R = B-r-f_D fills
// every batch), and the positions of ids in batch calls.
func analyse(r auditspec.Run) (auditspec.Analysis, error) {
	o, err := kv.OptionsOf[Options](r.Protocol, r.Options)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	b := o.EnsureDefaults(r.Capacity).B
	n := r.Workload + ": "
	checks := []audit.Check{
		FreshIDs(n+"every id written once, read at most once", r.All),
		IDPrefixes(n+"ids sharing their first bytes", r.All),
		audit.Sizes(fmt.Sprintf("%sB = %d addresses per batch call", n, b), r.Records, IsObjectCall, b),
	}
	checks = append(checks, audit.PositionChecks(r.Workload, audit.BatchLinks(r.All, ObjectPrefix), positionBins)...)
	a, err := Alpha(r.All)
	if err != nil {
		return auditspec.Analysis{Checks: append(checks, audit.ExactErr(n+"alpha measurable", err))}, nil
	}
	bound := int(TheoreticalAlpha(o, r.Capacity))
	checks = append(checks, AlphaBound(n+"Theorem 7.1's alpha", a, bound))
	return auditspec.Analysis{Checks: checks, Plots: map[string][]int{"alpha": a.Hist.Counts}}, nil
}
