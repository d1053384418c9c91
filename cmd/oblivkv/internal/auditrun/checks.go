package auditrun

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
)

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
