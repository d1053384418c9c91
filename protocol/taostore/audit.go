package taostore

import (
	"context"
	"fmt"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// auditSpec is TaoStore's registration with `oblivkv audit`: its clients
// run freely, analyse makes its checks of storage's view, and storage
// holds a read back to try the CURIOUS attack (curious).
var auditSpec = &auditspec.Spec{
	Prefixes: []string{BucketPrefix},
	Analyse:  analyse,
	Active:   []func(context.Context, auditspec.Active) (audit.Check, error){curious},
	Plots:    map[string]auditspec.Plot{"leaf": tree.LeafPlot},
}

// leafBins is the number of bins of the leaves read that the audit tests
// for uniformity: each expects well over five samples at its default
// requests.
const leafBins = 32

// analyse makes TaoStore's audits of the audit test from the Tap alone
// and the public parameters (K, the cached levels): one read of the
// stored levels of a path per request, buckets of one size; leaves
// uniform; path reads in flight together or consecutive on one path no
// more often than random leaves give (audit.SamePath); write-backs of
// whole stored paths; TaORAM's write-back schedule, one write-back of k
// paths every k path reads (TaoStore Sec. IV-B step 3,
// WriteBackSchedule); and under the hot key, the key followed across its
// accesses (tree.HotKeyWalk). The calls are those before the store's
// Close, and the write-backs in flight then, which Close waits for
// before it writes the whole subtree back in its last call.
func analyse(r auditspec.Run) (auditspec.Analysis, error) {
	g, err := tree.RunGeometry(r)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	o, err := kv.OptionsOf[Options](r.Protocol, r.Options)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	o = o.EnsureDefaults(r.Capacity)
	calls := r.Records
	if len(calls) > 0 && calls[len(calls)-1].Op == observe.OpWrite {
		calls = calls[:len(calls)-1] // Close's subtree write
	}
	v := ParseView(calls, g, o.CachedLevels)
	if answered := r.Requests - r.Unanswered; len(v.Reads) != answered {
		v.Shape = append(v.Shape, fmt.Sprintf("%d path reads for %d requests", len(v.Reads), answered))
	}
	bins := tree.LeafBins(v.Reads, g, leafBins)
	n := r.Workload + ": "
	checks := []audit.Check{
		audit.Exact(n+"one path read per request, buckets of one size", v.Shape),
		audit.Uniform(n+"leaves read", bins),
		audit.SamePath(n+"path reads in flight together or consecutive", v.Reads, g.Leaves()),
		audit.Exact(n+"write-backs are whole stored paths", v.WBShape),
		WriteBackSchedule(n+"a write-back of the paths every K path reads", v.Reads, v.WriteBacks, o.K),
	}
	checks = append(checks, tree.HotKeyWalk(r, v.Reads, g)...)
	return auditspec.Analysis{Checks: checks, Plots: map[string][]int{"leaf": bins}, Compared: map[string][]int{"leaves read": bins}}, nil
}
