package treebeard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// auditSpec is Treebeard's registration with `oblivkv audit`: the audit
// ends each epoch itself (paceEpochs), counts a bucket's slots and
// metadata as one unit of storage, and makes Treebeard's own checks of
// storage's view (analyse).
var auditSpec = &auditspec.Spec{
	Prefixes: []string{treesPrefix},
	Pace:     paceEpochs,
	Unit:     bucketUnit,
	Analyse:  analyse,
	Plots:    map[string]auditspec.Plot{"leaf": {Title: "Leaves read (leaf bins, tree by tree)", YLabel: "path reads"}},
}

// leafBins is the number of leaf bins per tree of the histograms the
// audit tests for uniformity: each (tree, bin) cell expects well over
// five samples at the audit's default requests.
const leafBins = 16

// paceEpochs puts the store on a fake clock the audit advances: the
// audit issues its requests in rounds, and once a round's requests are
// all in the collecting epochs it advances the clock by one epoch, which
// ends them, and waits for every reply, so each round is one epoch. The
// rounds are the epochs even when the options forward every request at
// once (a negative Epoch), which the audit runs at the default epoch.
func paceEpochs(options any) (any, auditspec.Clock, error) {
	o, err := kv.OptionsOf[Options](protocolName, options)
	if o.Epoch < 0 {
		o.Epoch = DefaultEpoch
	}
	clock := clockwork.NewFakeClock()
	o.TestingKnobs.Clock = clock
	return o, epochClock{clock: clock, epoch: o.EnsureDefaults(0).Epoch}, err
}

// epochClock ends the epochs of an audit's rounds.
type epochClock struct {
	clock *clockwork.FakeClock
	epoch time.Duration
}

// Round ends the round's epoch once it holds the round's requests.
func (c epochClock) Round(ctx context.Context, r auditspec.Round) error {
	full := func() bool { return r.Stat(kv.StatEpochRequests) == float64(r.Requests) }
	if err := auditspec.WaitUntil(ctx, full); err != nil {
		return err
	}
	r.Mark()
	c.clock.Advance(c.epoch)
	return nil
}

// Finish does nothing: the last round's epoch has ended.
func (epochClock) Finish(auditspec.Round) {}

// bucketUnit names the bucket of a slot or metadata address, and any
// other address by itself: an operation that touches one of a bucket's
// addresses touches the others (its rewrite holds them all), so counting
// them apart would count one bucket's calls Z+S+1 times and make a
// comparison of workloads see differences several times larger than
// they are.
func bucketUnit(addr string) string {
	l, ok := treeLayout(addr)
	if !ok {
		return addr
	}
	if b, _, ok := l.ParseSlot(addr); ok {
		return l.MetaAddr(b)
	}
	return addr
}

// analyse makes Treebeard's audits (b), (c), (d), (e), (g), (i), (j) and
// (l) of the audit test from the Tap alone and the public parameters
// (view.go). The audit ends each epoch itself (paceEpochs), so (j), one
// multi-path read per tree and epoch, and the distinct paths per
// multi-path read, compared across workloads, apply as in the test.
func analyse(r auditspec.Run) (auditspec.Analysis, error) {
	geo, err := tree.RunGeometry(r)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	o, err := kv.OptionsOf[Options](r.Protocol, r.Options)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	cached, err := r.Stat(kv.StatCachedLevels)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	o = o.EnsureDefaults(r.Capacity)
	n := r.Workload + ": "
	ops, err := Views(r.Records, o.Trees, o.Z)
	if err != nil {
		return auditspec.Analysis{Checks: []audit.Check{audit.ExactErr(n+"storage's view parses as multi-path reads and evictions", err)}}, nil
	}
	cells := LeafCells(geo, ops, leafBins)
	order, reshuffles, paths := treeChecks(geo, int(cached), o, ops)
	z, slots := o.Z, o.Z+o.S
	checks := []audit.Check{
		audit.ExactErr(n+"slots of one size, metadata of another", SlotSizes(r.Records, o.Trees)),
		audit.Exact(n+"evictions in reverse-lexicographic order", order),
		audit.Exact(n+"buckets reshuffled exactly after S reads", reshuffles),
		EvictionCount(r.Workload, paths, r.Requests, o.Trees, o.A, o.K),
		ReadsPerEpoch(r.Workload, ops, r.Marks),
		audit.Uniform(n+"trees read", audit.SumRows(cells, o.Trees)),
		audit.Uniform(n+"(tree, leaf bin) cells read", cells),
		audit.Uniform(n+"slot offsets of path reads", SlotOffsets(ops, slots)),
		audit.Choices(n+"slots path reads take, among their buckets' unread ones", ringoram.Choices(ops, slots), slots),
		SameLeaf(n+"paths of one multi-path read on one leaf", geo, z, ops),
	}
	compared := map[string][]int{"leaves read": cells, "distinct paths per multi-path read": DistinctLeaves(geo, ops).Counts}
	return auditspec.Analysis{Checks: checks, Plots: map[string][]int{"leaf": cells}, Compared: compared}, nil
}

// treeChecks runs audits (d) and (e) on each tree of ops, and counts the
// paths evicted in all.
func treeChecks(geo tree.Geometry, cached int, o Options, ops [][]ringoram.Op) (order, reshuffles []string, paths int) {
	for t := range o.Trees {
		ks := EvictionSizes(geo, ops[t])
		for _, e := range ks {
			paths += e
		}
		if err := EvictionOrder(geo, cached, o.K, ops[t], ks); err != nil {
			order = append(order, fmt.Sprintf("tree %d: %v", t, err))
		}
		if err := Reshuffles(o.Z, o.S, ops[t]); err != nil {
			reshuffles = append(reshuffles, fmt.Sprintf("tree %d: %v", t, err))
		}
	}
	return order, reshuffles, paths
}

// CheckView runs the structural checks of storage's view on records,
// the Tap of a cluster's ORAM shard's storage from its first start (its
// replicas' taps merged by time): past the writes of the empty trees,
// which the shard's first leader issues before any Read, they parse as
// multi-path reads and evictions, slots have one size and metadata
// another, each tree's evictions go in reverse-lexicographic order and
// its buckets are reshuffled exactly after S reads. A leader that took
// over a tree and chose its Read or its eviction afresh fails them.
func (sh Shape) CheckView(records []observe.Record) error {
	if first := slices.IndexFunc(records, func(r observe.Record) bool { return r.Op == observe.OpRead }); first >= 0 {
		records = records[first:]
	} else {
		records = nil
	}
	o := sh.opts
	ops, err := Views(records, o.Trees, o.Z)
	if err != nil {
		return err
	}
	errs := []error{SlotSizes(records, o.Trees)}
	cached := cachedLevels(o.CachedLevels, sh.geo.L)
	order, reshuffles, _ := treeChecks(sh.geo, cached, o, ops)
	for _, msg := range append(order, reshuffles...) {
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}
