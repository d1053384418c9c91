package waffle_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/waffle"
)

// The obliviousness audit: what storage sees of Waffle must follow its
// rules whatever the clients ask. Each audited run bulk-loads a full store
// and runs clients (90% gets, 10% puts) on a skewed (Zipf 0.99) and on a
// uniform workload (auditWorkloads); on each run's tap log, the storage
// operator's view, seven checks (and, with the proxy's trace as ground
// truth, those of follow_test.go: one key followed across its accesses,
// and where a batch puts its real objects):
//
//   - fresh ids (exact, waffle.FreshIDs): every storage id is
//     written once and read at most once (Waffle Sec. 5);
//   - id prefixes (waffle.IDPrefixes): no more pairs of ids share
//     their first bytes than random ids give;
//   - alpha bound (exact, waffle.AlphaBound): every id is read
//     within Theorem 7.1's alpha batches of its write;
//   - batch sizes (exact, audit.Sizes): after the bulk load, every Read,
//     Write and Delete of objects lists exactly B addresses;
//   - positions (audit.PositionChecks, three chi-square tests of
//     independence at audit.Significance, positions in positionBins equal
//     bins, ages in positionBins bins of about equal counts): an
//     address's place in the Read that reads it, its place in the Write
//     that wrote it and its age in batches are pairwise independent.
//
// When batches run is not audited: a batch closes when R requests wait,
// or Options.Timeout after the first, so batch timing follows the
// requests' arrival by design. Waffle's security definition (Sec. 5.1)
// concerns the sequence of server accesses, not their timing.
//
// Power: every injected leak (leakCases) fails its check far from the
// threshold, in runs of leakBatches batches at the first parameter set.
// The exact checks fail on thousands of violations. The position checks
// see about 21,000 links in such a run; listing the real queries first in
// the Read, or the dummies first in the Write, gives statistics of about
// 27,000 and 11,000 against a critical value of 45. A fixed dependence's
// chi-square statistic grows in proportion to the number of links, so a
// run ten times shorter would still fail at audit.DecisiveP.
const positionBins = 5 // B = 40 and B = 60 split into equal bins of 8 and 12 places

// obliviousSetups are the parameter sets of the audit: the alpha/beta
// audit's (N = 2048, B:R:f_D = 40:8:8, C = 200, D = 683; alpha 86), and
// another ratio with the package's default C and D for it (B:R:f_D =
// 60:20:10, C = B-f_D+R = 70, D = 683; alpha 69), with twice R clients.
var obliviousSetups = []struct {
	name  string
	setup auditSetup
}{
	{"B=40,R=8,f_D=8,C=200", defaultAudit(auditOpts)},
	{"B=60,R=20,f_D=10", auditSetup{n: auditN, batches: 1000, clients: 40, valueSize: 16,
		opts: waffle.Options{B: 60, R: 20, FD: 10, Timeout: 200 * time.Microsecond}}},
}

// Check names.
const (
	checkFreshIDs  = "fresh ids"
	checkPrefixes  = "id prefixes"
	checkAlpha     = "alpha bound"
	checkSizes     = "batch sizes"
	checkReadPos   = "read position and age"
	checkWritePos  = "write position and age"
	checkPositions = "read and write positions"
)

var checkNames = []string{checkFreshIDs, checkAlpha, checkSizes, checkReadPos, checkWritePos, checkPositions, checkPrefixes}

// obliviousChecks runs the audit's checks on the tap log of a run of
// setup on workload w, keyed by check name; it fails the test if the log
// holds too few links for the position checks to have power.
func obliviousChecks(t *testing.T, w string, setup auditSetup, raw storeRun) map[string]audit.Check {
	t.Helper()
	opts := setup.opts.EnsureDefaults(setup.n)
	batches := raw.records[raw.loaded:]
	checks := map[string]audit.Check{
		checkFreshIDs: waffle.FreshIDs(w+": every id written once, read at most once", raw.records),
		checkAlpha:    alphaCheck(w+": Theorem 7.1's alpha", raw.records, int(waffle.TheoreticalAlpha(setup.opts, setup.n))),
		checkSizes:    audit.Sizes(fmt.Sprintf("%s: B = %d addresses per batch call", w, opts.B), batches, waffle.IsObjectCall, opts.B),
		checkPrefixes: waffle.IDPrefixes(w+": ids sharing their first bytes", raw.records),
	}
	links := audit.BatchLinks(batches, waffle.ObjectPrefix)
	if reads := opts.B * setup.batches; len(links) < reads/2 {
		t.Fatalf("%s: %d links of reads to writes in %d batches; want at least %d", w, len(links), setup.batches, reads/2)
	}
	for i, c := range audit.PositionChecks(w, links, positionBins) {
		checks[checkNames[3+i]] = c
	}
	raw.tr.mu.Lock()
	defer raw.tr.mu.Unlock()
	for _, c := range followChecks(t, w, batches, raw.tr.traced, opts.B) {
		checks[strings.TrimPrefix(c.Name, w+": ")] = c
	}
	return checks
}

// alphaCheck is waffle.AlphaBound on records; a log on which alpha is
// undefined (an id written or read twice, which the fresh ids check
// reports) fails it.
func alphaCheck(name string, records []observe.Record, bound int) audit.Check {
	a, err := waffle.Alpha(records)
	if err != nil {
		return audit.Exact(name, []string{"alpha undefined: an id is written or read twice"})
	}
	return waffle.AlphaBound(name, a, bound)
}

// TestObliviousAudit runs both workloads at both parameter sets; every
// check passes on each run.
func TestObliviousAudit(t *testing.T) {
	for _, ps := range obliviousSetups {
		t.Run(ps.name, func(t *testing.T) {
			for _, w := range auditWorkloads(t, ps.setup.n) {
				checks := obliviousChecks(t, w.name, ps.setup, runStore(t, ps.setup, w.next))
				for _, name := range slices.Sorted(maps.Keys(checks)) {
					c := checks[name]
					t.Log(c)
					if !c.Pass() {
						t.Error(c)
					}
				}
			}
		})
	}
}

// leakCases are the leaks injected into Waffle (leak.go), each with the
// workload that exposes it and the check that must fail on it. On the
// leaks marked unseen no check of checkNames, those made from storage's
// view alone, fails decisively: only the checks that follow one key, or
// place a batch's real objects, with the proxy's trace as ground truth
// catch them. A Write of the victims in eviction order is not unseen: the
// cache evicts least recently used first, about the order in which fake
// queries read the victims again, so storage sees it as write position
// and age (follow_test.go); ids keyed in part are not unseen either:
// storage sees their shared prefixes (id prefixes); the keyed orders show there faintly where
// popular keys come back to storage again and again at short ages (under
// Zipf, with B = 5 in `oblivkv audit`, at times decisively: the keyed
// hash of the popular keys decides).
var leakCases = []struct {
	name     string
	leak     waffle.Leak
	workload string
	check    string
	unseen   bool
}{
	{"real query keeps its id", waffle.LeakRealKeepsID, "uniform", checkFreshIDs, false},
	{"read in plan order", waffle.LeakReadInPlanOrder, "uniform", checkReadPos, false},
	{"dummies written first", waffle.LeakDummiesWrittenFirst, "uniform", checkWritePos, false},
	{"f_R fixed at B-R-f_D", waffle.LeakFixedFill, "zipf0.99", checkSizes, false},
	{"random fake queries", waffle.LeakRandomFakes, "uniform", checkAlpha, false},
	{"read ordered by keyed hash", waffle.LeakKeyedReadOrder, "uniform", checkReadWalk + followIndependent, true},
	{"write ordered by keyed hash", waffle.LeakKeyedWriteOrder, "uniform", checkWriteWalk + followIndependent, true},
	{"victims written in eviction order", waffle.LeakVictimsInEvictionOrder, "uniform", checkWritePlacement + placementIndependent, false},
	{"real queries read in plan order", waffle.LeakRealsInPlanOrder, "uniform", checkReadPlacement + placementIndependent, true},
	{"ids keyed in part", waffle.LeakKeyedIDPrefix, "uniform", checkIDWalk + followAgain, false},
}

// leakBatches is the length of a run with a leak injected: shorter than
// the clean runs, and still long enough to fail by far (see Power above).
const leakBatches = 600

// TestAuditsCatchLeaks injects each leak of leakCases at the audit's
// parameters, in runs of leakBatches batches, and requires its check to fail decisively (an exact
// violation, or a p-value below audit.DecisiveP), and no check of
// storage's view alone to fail decisively on the leaks marked unseen. The
// other checks are logged, to show what else each leak breaks.
func TestAuditsCatchLeaks(t *testing.T) {
	setup := obliviousSetups[0].setup
	setup.batches = leakBatches
	workloads := auditWorkloads(t, setup.n)
	for _, lc := range leakCases {
		t.Run(lc.name, func(t *testing.T) {
			i := slices.IndexFunc(workloads, func(w auditWorkload) bool { return w.name == lc.workload })
			leaky := setup
			leaky.opts.TestingKnobs.Leak = lc.leak
			checks := obliviousChecks(t, lc.workload, leaky, runStore(t, leaky, workloads[i].next))
			for _, name := range checkNames {
				if name != lc.check {
					t.Logf("(other check) %v", checks[name])
				}
				if lc.unseen && checks[name].Decisive() {
					t.Errorf("leak %q fails a check of storage's view alone decisively: %v", lc.name, checks[name])
				}
			}
			c := checks[lc.check]
			t.Log(c)
			if !c.Decisive() {
				t.Fatalf("leak %q: %v; want a decisive failure", lc.name, c)
			}
		})
	}
}
