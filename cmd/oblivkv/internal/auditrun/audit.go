package auditrun

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/kv"
)

// Result is what an audit found.
type Result struct {
	Config Config
	Runs   []*Run
	// Attack is the frequency attacker's score on the zipf run (nil
	// without one).
	Attack *Attack
	Checks []audit.Check
	// Plots are histograms by name and workload: "access" (addresses by
	// how many calls touched them, in bins 0, 1, 2-3, 4-7...), and the
	// protocol's own (auditspec.Analysis.Plots).
	Plots map[string]map[string][]int
	// Compared are the protocol's own observables compared across
	// workloads: histograms by observable and workload.
	Compared map[string]map[string][]int
}

// Pass reports whether every check passed.
func (r *Result) Pass() bool {
	for _, c := range r.Checks {
		if !c.Pass() {
			return false
		}
	}
	return true
}

// Audit runs cfg.Protocol on each workload and every analysis that
// applies.
func Audit(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	res := &Result{Config: cfg, Plots: map[string]map[string][]int{}, Compared: map[string]map[string][]int{}}
	for i, name := range cfg.Workloads {
		keys, err := keysOf(name, cfg.Records, cfg.Ops, cfg.Clients, cfg.Seed+uint64(i))
		if err != nil {
			return nil, err
		}
		r, err := run(ctx, cfg, name, keys)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, r)
		if err := res.analyse(cfg, r); err != nil {
			return nil, err
		}
	}
	res.compare()
	for _, act := range specOf(cfg.Protocol).Active {
		c, err := act(ctx, auditspec.Active{Protocol: cfg.Protocol, Options: cfg.Options, Capacity: cfg.Records, Timeout: cfg.Timeout})
		if err != nil {
			return nil, err
		}
		res.Checks = append(res.Checks, c)
	}
	return res, nil
}

// specOf returns the audit registration of protocol (the zero Spec for a
// protocol that registers none).
func specOf(protocol string) auditspec.Spec {
	if p, ok := kv.Lookup(protocol); ok && p.Audit != nil {
		return *p.Audit
	}
	return auditspec.Spec{}
}

// analyse adds the checks and plots of one run.
func (res *Result) analyse(cfg Config, r *Run) error {
	res.plot("access", r.Workload, log2Bins(unitCounts(r.Records, sameAddress)))
	res.Checks = append(res.Checks, answered(r))
	if r.Workload == "zipf" {
		a := attack(r)
		res.Attack = &a
		res.Checks = append(res.Checks, a.Check)
	}
	own := specOf(cfg.Protocol).Analyse
	if own == nil {
		return nil
	}
	a, err := own(r.view(cfg))
	if err != nil {
		return err
	}
	res.Checks = append(res.Checks, a.Checks...)
	for name, h := range a.Plots {
		res.plot(name, r.Workload, h)
	}
	for name, h := range a.Compared {
		add(res.Compared, name, r.Workload, h)
	}
	return nil
}

func (res *Result) plot(name, workload string, h []int) { add(res.Plots, name, workload, h) }

// plotTitle returns the title and the y label of plot name: the audit's
// own, or the protocol's (auditspec.Spec.Plots).
func (res *Result) plotTitle(name string) [2]string {
	if t, ok := plotTitles[name]; ok {
		return t
	}
	p := specOf(res.Config.Protocol).Plots[name]
	return [2]string{p.Title, p.YLabel}
}

func add(m map[string]map[string][]int, name, workload string, h []int) {
	if m[name] == nil {
		m[name] = map[string][]int{}
	}
	m[name][workload] = h
}

// compare adds the two-workload indistinguishability checks: every
// workload against the first (uniform when it runs, the reference of
// DESIGN section 6), on each observable: how many calls touched each
// unit of storage (auditspec.Spec.Unit), the bytes of each address in a
// call, and those the protocol's own analysis compares (such as the
// leaves read). The first two compare the first n calls of each log, n
// the shorter's length: storage sees the runs over equal lengths (a run
// of cache hits ends sooner, which a protocol that batches requests need
// not hide from the clients' side, only from storage).
func (res *Result) compare() {
	if len(res.Runs) < 2 {
		return
	}
	base := res.Runs[0]
	for _, r := range res.Runs {
		if r.Workload == "uniform" {
			base = r
		}
	}
	unit := unitOf(specOf(res.Config.Protocol))
	for _, r := range res.Runs {
		if r == base {
			continue
		}
		n := r.Workload + " against " + base.Workload + ": "
		m := min(len(r.Records), len(base.Records))
		x, y := r.Records[:m], base.Records[:m]
		sa, sb := sizeCells(x, y)
		res.Checks = append(res.Checks,
			audit.Homogeneous(n+"addresses by calls touching them", log2Bins(unitCounts(x, unit)), log2Bins(unitCounts(y, unit))),
			audit.Homogeneous(n+"bytes per address in a call", sa, sb))
		for _, name := range slices.Sorted(maps.Keys(res.Compared)) {
			h := res.Compared[name]
			res.Checks = append(res.Checks, audit.Homogeneous(n+name, h[r.Workload], h[base.Workload]))
		}
	}
}

// Failed returns the checks that failed.
func (res *Result) Failed() []audit.Check {
	var out []audit.Check
	for _, c := range res.Checks {
		if !c.Pass() {
			out = append(out, c)
		}
	}
	return out
}

// summary is one line per check, for the terminal.
func (res *Result) String() string {
	s := fmt.Sprintf("%s: %d workloads of %d requests over %d keys, %d clients\n", res.Config.Protocol,
		len(res.Runs), res.Config.Ops, res.Config.Records, res.Config.Clients)
	if a := res.Attack; a != nil {
		s += fmt.Sprintf("frequency attack: %.1f%% of the top %d keys recovered; chance %.1f%%, bound %.1f%%\n",
			100*a.Accuracy, len(a.Named), 100*a.Chance, 100*a.Bound)
	}
	for _, c := range res.Checks {
		s += c.String() + "\n"
	}
	verdict := "PASS"
	if f := res.Failed(); len(f) > 0 {
		verdict = fmt.Sprintf("FAIL: %d of %d checks", len(f), len(res.Checks))
	}
	return s + verdict + "\n"
}

// finite maps an infinite or NaN value to a finite one for JSON, which
// has neither: +Inf to the largest float64.
func finite(v float64) float64 {
	switch {
	case math.IsNaN(v):
		return 0
	case math.IsInf(v, 1):
		return math.MaxFloat64
	case math.IsInf(v, -1):
		return -math.MaxFloat64
	}
	return v
}
