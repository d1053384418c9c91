package auditrun

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/cloak"
	"github.com/oblivkv/oblivkv/protocol/oblivistore"
	"github.com/oblivkv/oblivkv/protocol/taostore"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/protocol/waffle"
)

// analysis is a protocol's own checks on one run, the histograms it
// plots (name to histogram) and those compared across workloads
// (observable to histogram; compare).
type analysis func(cfg Config, r *Run) (checks []audit.Check, plots, compared map[string][]int, err error)

// analyses are the structural checks of each protocol, from the Tap
// alone and the protocol's public parameters.
var analyses = map[string]analysis{
	"treebeard":   treebeardChecks,
	"pathoram":    pathoramChecks,
	"taostore":    taostoreChecks,
	"waffle":      waffleChecks,
	"cloak":       cloakChecks,
	"oblivistore": oblivistoreChecks,
}

// Structural reports whether protocol has checks of its own here.
func Structural(protocol string) bool { _, ok := analyses[protocol]; return ok }

// Bins of the histograms that statistical checks test for uniformity:
// each cell expects well over five samples at DefaultOps.
const (
	leafBins     = 16 // per tree for treebeard; 16 (tree, bin) cells per tree
	pathoramBins = 32
	taostoreBins = 32
	positionBins = 5
	followBins   = 8 // an 8x8 table of consecutive positions
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

// answered is the check that every request of r was answered: a run cut
// off (a stalled batch, an epoch that never ends, Config.Timeout) fails
// it, whatever the other checks make of the calls before.
func answered(r *Run) audit.Check {
	if r.Unanswered == 0 {
		return audit.Exact(r.Workload+": every request answered", nil)
	}
	return audit.Exact(r.Workload+": every request answered", []string{fmt.Sprintf("%d of %d requests unanswered when the run was cut off (%s)",
		r.Unanswered, len(r.Requests), r.Stalled)})
}

// treebeardChecks are Treebeard's audits (b), (c), (d), (e), (g), (i), (j)
// and (l) of protocol/treebeard's audit test, from the Tap alone and the
// public parameters: see audit/treebeard.go. The run ends each epoch
// itself (pace.go), so (j), one multi-path read per tree and epoch, and
// the distinct paths per multi-path read, compared across workloads,
// apply as in the test.
func treebeardChecks(cfg Config, r *Run) ([]audit.Check, map[string][]int, map[string][]int, error) {
	levels, err := stat(r.Stats, "tree_levels")
	if err != nil {
		return nil, nil, nil, err
	}
	o, err := kv.OptionsOf[treebeard.Options](cfg.Protocol, cfg.Options)
	if err != nil {
		return nil, nil, nil, err
	}
	cached, err := stat(r.Stats, "cached_levels")
	if err != nil {
		return nil, nil, nil, err
	}
	geo := tree.Geometry{L: int(levels) - 1}
	o = o.EnsureDefaults(cfg.Records)
	trees, z, s, a, k := o.Trees, o.Z, o.S, o.A, o.K
	n := r.Workload + ": "
	ops, err := audit.TreebeardViews(r.Records, trees, z)
	if err != nil {
		return []audit.Check{audit.Exact(n+"storage's view parses as multi-path reads and evictions", []string{err.Error()})}, nil, nil, nil
	}
	var order, reshuffles []string
	paths := 0
	for t := range trees {
		ks := audit.TreebeardEvictionSizes(geo, ops[t])
		for _, e := range ks {
			paths += e
		}
		if err := audit.TreebeardEvictionOrder(geo, int(cached), k, ops[t], ks); err != nil {
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
		audit.TreebeardEvictionCount(r.Workload, paths, len(r.Requests), trees, a, k),
		audit.TreebeardReadsPerEpoch(r.Workload, ops, r.Marks),
		audit.Uniform(n+"trees read", audit.SumRows(cells, trees)),
		audit.Uniform(n+"(tree, leaf bin) cells read", cells),
		audit.Uniform(n+"slot offsets of path reads", audit.TreebeardSlotOffsets(ops, z+s)),
		audit.Choices(n+"slots path reads take, among their buckets' unread ones", audit.TreebeardChoices(ops, z+s), z+s),
		audit.TreebeardSameLeaf(n+"paths of one multi-path read on one leaf", geo, z, ops),
	}
	compared := map[string][]int{"leaves read": cells, "distinct paths per multi-path read": audit.TreebeardDistinctLeaves(geo, ops).Counts}
	return checks, map[string][]int{"leaf": cells}, compared, nil
}

func exactErr(name string, err error) audit.Check {
	if err != nil {
		return audit.Exact(name, []string{err.Error()})
	}
	return audit.Exact(name, nil)
}

// pathoramChecks are pathoram's audits: every access a Read and a Write
// of one whole path, leaves uniform, consecutive accesses on one path no
// more often than random leaves give (audit.SamePath), and under the hot
// key, the key followed across its accesses (hotKeyWalk).
func pathoramChecks(_ Config, r *Run) ([]audit.Check, map[string][]int, map[string][]int, error) {
	levels, err := stat(r.Stats, "tree_levels")
	if err != nil {
		return nil, nil, nil, err
	}
	size, err := stat(r.Stats, "bucket_bytes")
	if err != nil {
		return nil, nil, nil, err
	}
	g := tree.Geometry{L: int(levels) - 1}
	reads, violations := audit.PathAccesses(g, tree.Layout{Prefix: audit.PathORAMPrefix}, int(size), r.Records)
	bins := leafBinsOf(reads, g, pathoramBins)
	n := r.Workload + ": "
	checks := []audit.Check{
		audit.Exact(n+"one read and one write of a path per access", violations),
		audit.Uniform(n+"leaves read", bins),
		audit.SamePath(n+"consecutive reads of one path", reads, g.Leaves()),
	}
	checks = append(checks, hotKeyWalk(r, reads, g)...)
	return checks, map[string][]int{"leaf": bins}, map[string][]int{"leaves read": bins}, nil
}

// hotKeyWalk follows the hot key across its accesses (audit.FollowKey)
// on the hotkey workload of a tree ORAM: every path read is the hot key's
// real read or a fake read of a random leaf, each leaf fresh and
// independent of what storage saw before, so the leaves in the order
// storage saw them are one walk that must look like independent uniform
// draws. A leaf a block moves to that follows from the one it left fails
// "same successor again". Other workloads have no one key to follow from
// storage's view.
func hotKeyWalk(r *Run, reads []audit.PathRead, g tree.Geometry) []audit.Check {
	if r.Workload != "hotkey" {
		return nil
	}
	walk := make([]int, len(reads))
	for i, p := range reads {
		walk[i] = int(p.Leaf)
	}
	return audit.FollowKey(r.Workload, [][]int{walk}, int(g.Leaves()), followBins)
}

func leafBinsOf(reads []audit.PathRead, g tree.Geometry, bins int) []int {
	leaves := make([]uint64, len(reads))
	for i, p := range reads {
		leaves[i] = p.Leaf
	}
	return audit.Bin(leaves, g.Leaves(), bins)
}

// taostoreChecks are TaoStore's audits of protocol/taostore's audit test
// from the Tap alone and the public parameters (K, the cached levels):
// one read of the stored levels of a path per request, buckets of one
// size; leaves uniform; path reads in flight together or consecutive on
// one path no more often than random leaves give (audit.SamePath);
// write-backs of whole stored paths; TaORAM's write-back schedule, one
// write-back of k paths every k path reads (TaoStore Sec. IV-B step 3,
// audit.WriteBackSchedule); and under the hot key, the key followed
// across its accesses (hotKeyWalk). The calls are those before the store's
// Close, and the write-backs in flight then, which Close waits for before
// it writes the whole subtree back in its last call.
func taostoreChecks(cfg Config, r *Run) ([]audit.Check, map[string][]int, map[string][]int, error) {
	levels, err := stat(r.Stats, "tree_levels")
	if err != nil {
		return nil, nil, nil, err
	}
	o, err := kv.OptionsOf[taostore.Options](cfg.Protocol, cfg.Options)
	if err != nil {
		return nil, nil, nil, err
	}
	g := tree.Geometry{L: int(levels) - 1}
	calls := r.Records
	if len(calls) > 0 && calls[len(calls)-1].Op == observe.OpWrite {
		calls = calls[:len(calls)-1] // Close's subtree write
	}
	v := audit.ParseTaoStore(calls, g, o.CachedLevels)
	if answered := len(r.Requests) - r.Unanswered; len(v.Reads) != answered {
		v.Shape = append(v.Shape, fmt.Sprintf("%d path reads for %d requests", len(v.Reads), answered))
	}
	bins := leafBinsOf(v.Reads, g, taostoreBins)
	n := r.Workload + ": "
	checks := []audit.Check{
		audit.Exact(n+"one path read per request, buckets of one size", v.Shape),
		audit.Uniform(n+"leaves read", bins),
		audit.SamePath(n+"path reads in flight together or consecutive", v.Reads, g.Leaves()),
		audit.Exact(n+"write-backs are whole stored paths", v.WBShape),
		audit.WriteBackSchedule(n+"a write-back of the paths every K path reads", v.Reads, v.WriteBacks, o.EnsureDefaults(cfg.Records).K),
	}
	checks = append(checks, hotKeyWalk(r, v.Reads, g)...)
	return checks, map[string][]int{"leaf": bins}, map[string][]int{"leaves read": bins}, nil
}

// waffleChecks are Waffle's alpha (Theorem 7.1's bound, Waffle Sec. 7),
// fresh ids, ids that share no more prefixes than random ones, B addresses per batch call (Sec. 6.2: f_R = B-r-f_D fills
// every batch), and the positions of ids in batch calls.
func waffleChecks(cfg Config, r *Run) ([]audit.Check, map[string][]int, map[string][]int, error) {
	o, err := kv.OptionsOf[waffle.Options](cfg.Protocol, cfg.Options)
	if err != nil {
		return nil, nil, nil, err
	}
	b := o.EnsureDefaults(cfg.Records).B
	n := r.Workload + ": "
	checks := []audit.Check{
		audit.WaffleFreshIDs(n+"every id written once, read at most once", r.All),
		audit.WaffleIDPrefixes(n+"ids sharing their first bytes", r.All),
		audit.Sizes(fmt.Sprintf("%sB = %d addresses per batch call", n, b), r.Records, isWaffleObjectCall, b),
	}
	checks = append(checks, audit.PositionChecks(r.Workload, audit.BatchLinks(r.All, audit.WaffleObjectPrefix), positionBins)...)
	a, err := audit.WaffleAlpha(r.All)
	if err != nil {
		return append(checks, audit.Exact(n+"alpha measurable", []string{err.Error()})), nil, nil, nil
	}
	bound := int(waffle.TheoreticalAlpha(o, cfg.Records))
	checks = append(checks, audit.WaffleAlphaBound(n+"Theorem 7.1's alpha", a, bound))
	return checks, map[string][]int{"alpha": a.Hist.Counts}, nil, nil
}

// isWaffleObjectCall selects the Reads, Writes and Deletes of objects.
func isWaffleObjectCall(r observe.Record) bool {
	return r.Op != observe.OpScan && len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], audit.WaffleObjectPrefix)
}

// cloakChecks are Cloak's budgets (b_d addresses from every set d, every
// batch, written back as read), one batch per tick of the run's clock
// (Cloak Sec. 4: batches leave at a fixed rate, busy or idle), runs of
// one address over consecutive batches, the positions of addresses in
// batch calls, and the checkpoint schedule (a checkpoint every
// cloak.CheckpointBatches batches, whatever the clients wrote).
func cloakChecks(cfg Config, r *Run) ([]audit.Check, map[string][]int, map[string][]int, error) {
	o, err := kv.OptionsOf[cloak.Options](cfg.Protocol, cfg.Options)
	if err != nil {
		return nil, nil, nil, err
	}
	budgets, err := o.BudgetsFor(cfg.Records)
	if err != nil {
		return nil, nil, nil, err
	}
	res, err := audit.CloakBudgets(r.All, budgets)
	n := r.Workload + ": "
	if err != nil {
		res.Violations = append(res.Violations, err.Error())
	}
	open := r.All[:r.Closing]
	marks := make([]int, len(r.Marks))
	for i, m := range r.Marks {
		marks[i] = int(m) // the log holds every call from the first, numbered from 1
	}
	checks := []audit.Check{
		audit.Exact(n+"b_d addresses from every set d, written back as read", res.Violations),
		audit.OneBatchPerTick(n+"one batch per tick", open, isCloakBatch, marks),
		audit.CloakStreaks(n+"one address read by consecutive batches", r.All, budgets, cloakStreak),
		audit.CloakCheckpoints(r.Workload, open, cloak.CheckpointBatches),
	}
	checks = append(checks, audit.PositionChecks(r.Workload, audit.BatchLinks(r.All, audit.CloakAddrPrefix), positionBins)...)
	return checks, map[string][]int{"set": setCounts(r.All, budgets)}, nil, nil
}

// isCloakBatch selects a batch's Read.
func isCloakBatch(r observe.Record) bool {
	return r.Op == observe.OpRead && len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], audit.CloakAddrPrefix)
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

// oblivistoreChecks are ObliviStore's audits that the Tap alone
// supports: no slot read twice between two writes of its level, every
// write of whole levels (audit.SlotsReadOnce, the hierarchical ORAM's
// rule, ObliviStore Sec. III-B); every slot read uniform among its
// level's slots not read since the level was written
// (audit.UnreadSlotChoices: a level written unpermuted, or dummies read
// in order, fail it); and, across workloads, how many slots a read takes. The test's other checks (every request reads one slot of
// every readable level, partitions uniform) need the proxy's word on
// which reads are requests' (audit.TapPartitionCalls says why).
func oblivistoreChecks(_ Config, r *Run) ([]audit.Check, map[string][]int, map[string][]int, error) {
	calls, err := audit.TapPartitionCalls(r.All, oblivistore.SlotPrefix)
	n := r.Workload + ": "
	if err != nil {
		return []audit.Check{audit.Exact(n+"storage's view parses as partition reads and writes", []string{err.Error()})}, nil, nil, nil
	}
	var slots []int
	for _, c := range calls {
		if !c.Write {
			for len(slots) <= len(c.Slots) {
				slots = append(slots, 0)
			}
			slots[len(c.Slots)]++
		}
	}
	return []audit.Check{
		audit.SlotsReadOnce(n+"slots read once", calls),
		audit.ChoicesByGroup(n+"slots read uniform among the unread", audit.UnreadSlotChoices(calls), followBins),
	}, nil, map[string][]int{"slots per read": slots}, nil
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
