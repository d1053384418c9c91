package pathoram

import (
	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// auditSpec is Path ORAM's registration with `oblivkv audit`: its
// clients run freely, and analyse makes its checks of storage's view.
// The store is journaled, as served: only then does an access hand its
// write-back to the next, so that storage sees the next Read first.
var auditSpec = &auditspec.Spec{
	Prefixes: []string{treePrefix},
	Journal:  true,
	Analyse:  analyse,
	Plots:    map[string]auditspec.Plot{"leaf": tree.LeafPlot},
}

// leafBins is the number of bins of the leaves read that the audit tests
// for uniformity: each expects well over five samples at its default
// requests.
const leafBins = 32

// analyse makes Path ORAM's checks of one run: every access a Read and a
// Write of one whole path (pathAccesses), leaves uniform, consecutive
// accesses on one path no more often than random leaves give
// (audit.SamePath), and under the hot key, the key followed across its
// accesses (tree.HotKeyWalk).
func analyse(r auditspec.Run) (auditspec.Analysis, error) {
	g, err := tree.RunGeometry(r)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	size, err := r.Stat(kv.StatBucketBytes)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	reads, violations := pathAccesses(g, tree.Layout{Prefix: treePrefix}, int(size), r.Records)
	bins := tree.LeafBins(reads, g, leafBins)
	n := r.Workload + ": "
	checks := []audit.Check{
		audit.Exact(n+"one read and one write of a path per access", violations),
		audit.Uniform(n+"leaves read", bins),
		audit.SamePath(n+"consecutive reads of one path", reads, g.Leaves()),
	}
	checks = append(checks, tree.HotKeyWalk(r, reads, g)...)
	return auditspec.Analysis{Checks: checks, Plots: map[string][]int{"leaf": bins}, Compared: map[string][]int{"leaves read": bins}}, nil
}
