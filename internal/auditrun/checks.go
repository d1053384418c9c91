package auditrun

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/cloak"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/protocol/waffle"
)

// analysis is a protocol's own checks on one run, with the plots they
// draw from (name to histogram).
type analysis func(cfg Config, r *Run) ([]audit.Check, map[string][]int, error)

// analyses are the structural checks of each protocol that has some the
// Tap alone supports; the others get the generic checks only.
var analyses = map[string]analysis{
	"treebeard": treebeardChecks,
	"pathoram":  pathoramChecks,
	"waffle":    waffleChecks,
	"cloak":     cloakChecks,
}

// Structural reports whether protocol has checks of its own here.
func Structural(protocol string) bool { _, ok := analyses[protocol]; return ok }

// Bins of the histograms that statistical checks test for uniformity:
// each cell expects well over five samples at DefaultOps.
const (
	leafBins     = 16 // per tree for treebeard; 16 (tree, bin) cells per tree
	pathoramBins = 32
	positionBins = 5
	// cloakStreak is how many consecutive batches reading one address
	// count as one run (protocol/cloak's audit uses the same).
	cloakStreak = 10
)

func stat(st kv.Stats, name string) (float64, error) {
	for _, e := range st.Extra {
		if e.Name == name {
			return e.Value, nil
		}
	}
	return 0, fmt.Errorf("%s reports no statistic %q", st.Protocol, name)
}

// treebeardChecks are Treebeard's audits (b), (c), (d), (e), (g) and (i)
// of protocol/treebeard's audit test, from the Tap alone, at the default
// parameters: see audit/treebeard.go.
func treebeardChecks(_ Config, r *Run) ([]audit.Check, map[string][]int, error) {
	levels, err := stat(r.Stats, "tree_levels")
	if err != nil {
		return nil, nil, err
	}
	geo := tree.Geometry{L: int(levels) - 1}
	trees, z, s := treebeard.DefaultTrees, treebeard.DefaultZ, treebeard.DefaultS
	n := r.Workload + ": "
	ops, err := audit.TreebeardViews(r.Records, trees, z)
	if err != nil {
		return []audit.Check{audit.Exact(n+"storage's view parses as multi-path reads and evictions", []string{err.Error()})}, nil, nil
	}
	var order, reshuffles []string
	paths := 0
	for t := range trees {
		ks := audit.TreebeardEvictionSizes(geo, ops[t])
		for _, k := range ks {
			paths += k
		}
		if err := audit.TreebeardEvictionOrder(geo, treebeard.DefaultK, ops[t], ks); err != nil {
			order = append(order, fmt.Sprintf("tree %d: %v", t, err))
		}
		if err := audit.TreebeardReshuffles(z, s, ops[t]); err != nil {
			reshuffles = append(reshuffles, fmt.Sprintf("tree %d: %v", t, err))
		}
	}
	cells := audit.TreebeardLeafCells(geo, ops, leafBins)
	checks := []audit.Check{
		exactErr(n+"slots of one size, metadata of another", audit.TreebeardSizes(r.Records, trees)),
		audit.Exact(n+"evictions in reverse-lexicographic order", order),
		audit.Exact(n+"buckets reshuffled exactly after S reads", reshuffles),
		audit.TreebeardEvictionCount(r.Workload, paths, len(r.Requests), trees, treebeard.DefaultA, treebeard.DefaultK),
		audit.Uniform(n+"trees read", audit.SumRows(cells, trees)),
		audit.Uniform(n+"(tree, leaf bin) cells read", cells),
		audit.Uniform(n+"slot offsets of path reads", audit.TreebeardSlotOffsets(ops, z+s)),
		audit.TreebeardSameLeaf(n+"paths of one multi-path read on one leaf", geo, z, ops),
	}
	return checks, map[string][]int{"leaf": cells}, nil
}

func exactErr(name string, err error) audit.Check {
	if err != nil {
		return audit.Exact(name, []string{err.Error()})
	}
	return audit.Exact(name, nil)
}

// pathoramChecks are pathoram's audits: every access a Read and a Write
// of one whole path, leaves uniform, and consecutive accesses on one
// path no more often than random leaves give (audit.SamePath).
func pathoramChecks(_ Config, r *Run) ([]audit.Check, map[string][]int, error) {
	levels, err := stat(r.Stats, "tree_levels")
	if err != nil {
		return nil, nil, err
	}
	size, err := stat(r.Stats, "bucket_bytes")
	if err != nil {
		return nil, nil, err
	}
	g := tree.Geometry{L: int(levels) - 1}
	reads, violations := audit.PathAccesses(g, tree.Layout{Prefix: audit.PathORAMPrefix}, int(size), r.Records)
	leaves := make([]uint64, len(reads))
	for i, p := range reads {
		leaves[i] = p.Leaf
	}
	bins := audit.Bin(leaves, g.Leaves(), pathoramBins)
	n := r.Workload + ": "
	return []audit.Check{
		audit.Exact(n+"one read and one write of a path per access", violations),
		audit.Uniform(n+"leaves read", bins),
		audit.SamePath(n+"consecutive reads of one path", reads, g.Leaves()),
	}, map[string][]int{"leaf": bins}, nil
}

// waffleChecks are Waffle's alpha (Theorem 7.1's bound, Waffle Sec. 7),
// fresh ids, and the positions of ids in batch calls.
func waffleChecks(cfg Config, r *Run) ([]audit.Check, map[string][]int, error) {
	n := r.Workload + ": "
	checks := []audit.Check{audit.WaffleFreshIDs(n+"every id written once, read at most once", r.All)}
	checks = append(checks, audit.PositionChecks(r.Workload, audit.BatchLinks(r.All, audit.WaffleObjectPrefix), positionBins)...)
	a, err := audit.WaffleAlpha(r.All)
	if err != nil {
		return append(checks, audit.Exact(n+"alpha measurable", []string{err.Error()})), nil, nil
	}
	bound := int(waffle.TheoreticalAlpha(waffle.Options{}, cfg.Records))
	checks = append(checks, audit.WaffleAlphaBound(n+"Theorem 7.1's alpha", a, bound))
	return checks, map[string][]int{"alpha": a.Hist.Counts}, nil
}

// cloakChecks are Cloak's budgets (b_d addresses from every set d, every
// batch, written back as read), runs of one address over consecutive
// batches, and the positions of addresses in batch calls.
func cloakChecks(cfg Config, r *Run) ([]audit.Check, map[string][]int, error) {
	budgets, err := cloak.DefaultBudgets(cfg.Records)
	if err != nil {
		return nil, nil, err
	}
	res, err := audit.CloakBudgets(r.All, budgets)
	n := r.Workload + ": "
	if err != nil {
		res.Violations = append(res.Violations, err.Error())
	}
	checks := []audit.Check{
		audit.Exact(n+"b_d addresses from every set d, written back as read", res.Violations),
		audit.CloakStreaks(n+"one address read by consecutive batches", r.All, budgets, cloakStreak),
	}
	checks = append(checks, audit.PositionChecks(r.Workload, audit.BatchLinks(r.All, audit.CloakAddrPrefix), positionBins)...)
	return checks, map[string][]int{"set": setCounts(r.All, budgets)}, nil
}

// setCounts is how many addresses the batches took from each
// reuse-distance set d (1-based; cell d-1), as storage infers the sets
// (audit.CloakBudgets): the budgets, batch after batch.
func setCounts(records []observe.Record, budgets []int) []int {
	res, _ := audit.CloakBudgets(records, budgets)
	out := make([]int, len(budgets))
	for i, b := range budgets {
		out[i] = b * res.Batches
	}
	return out
}

// log2Bins folds counts into bins by their bit length: 0, 1, 2-3, 4-7...
func log2Bins(counts []int) []int {
	var out []int
	for _, c := range counts {
		b := bits.Len(uint(c))
		for len(out) <= b {
			out = append(out, 0)
		}
		out[b]++
	}
	return out
}

// sizeCells returns the histograms of a's and b's per-address sizes over
// the sizes either shows, in increasing order.
func sizeCells(a, b []observe.Record) ([]int, []int) {
	var sizes []int
	for _, rs := range [][]observe.Record{a, b} {
		for _, r := range rs {
			sizes = append(sizes, r.Sizes...)
		}
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	hist := func(rs []observe.Record) []int {
		out := make([]int, len(sizes))
		for _, r := range rs {
			for _, s := range r.Sizes {
				i, _ := slices.BinarySearch(sizes, s)
				out[i]++
			}
		}
		return out
	}
	return hist(a), hist(b)
}
