package audit

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oblivkv/oblivkv/observe"
)

// CloakAddrPrefix begins every physical address of a Cloak store (the
// protocol's cloak.AddrPrefix; a test checks they agree).
const CloakAddrPrefix = "ck/p/"

// CloakResult is what CloakBudgets finds in a tap log.
type CloakResult struct {
	// Batches is the number of batches (Reads of physical addresses).
	Batches int
	// Violations describes every batch that did not take exactly b_d
	// addresses from set d for every d, or was not written back as read.
	Violations []string
	// Starts are the times the batches' Reads began, in order.
	Starts []time.Duration
}

// CloakBudgets checks Cloak's budgets (seed 002, Sec. 4) from a tap log
// alone, as the storage operator can: every Write of physical addresses
// forms a new reuse-distance set (the initial layout writes one set per
// Write, oldest first), so an address read when w Writes have been seen
// and last written by the v-th is in set d = w+1-v. Every batch must be a
// Read taking exactly budgets[d-1] addresses from set d for every d (and
// none from anywhere else), followed by a Write of the same addresses.
func CloakBudgets(records []observe.Record, budgets []int) (CloakResult, error) {
	var res CloakResult
	written := map[string]int{} // address -> index of the Write that last wrote it
	writes := 0
	var open []string // addresses of the batch read and not yet written back
	for _, r := range records {
		if r.Err || !cloakCall(r) {
			continue
		}
		switch r.Op {
		case observe.OpWrite:
			writes++
			if open != nil && !sameSet(open, r.Addrs) {
				res.Violations = append(res.Violations, fmt.Sprintf("batch %d: wrote back %d addresses other than the %d read", res.Batches, len(r.Addrs), len(open)))
			}
			open = nil
			for _, a := range r.Addrs {
				written[a] = writes
			}
		case observe.OpRead:
			res.Batches++
			res.Starts = append(res.Starts, r.Start)
			if open != nil {
				res.Violations = append(res.Violations, fmt.Sprintf("batch %d: read before the previous batch was written back", res.Batches))
			}
			open = r.Addrs
			if v := checkBudgets(r.Addrs, written, writes, budgets); v != "" {
				res.Violations = append(res.Violations, fmt.Sprintf("batch %d: %s", res.Batches, v))
			}
		default:
			return res, fmt.Errorf("audit: call %d is a %v of physical addresses", r.Seq, r.Op)
		}
	}
	return res, nil
}

func cloakCall(r observe.Record) bool {
	return len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], CloakAddrPrefix)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// checkBudgets describes how the addresses of one batch read miss the
// budgets ("" when they match exactly).
func checkBudgets(addrs []string, written map[string]int, writes int, budgets []int) string {
	counts := make([]int, len(budgets))
	seen := map[string]bool{}
	for _, a := range addrs {
		v, ok := written[a]
		if !ok {
			return fmt.Sprintf("address %q was never written", a)
		}
		if seen[a] {
			return fmt.Sprintf("address %q read twice", a)
		}
		seen[a] = true
		d := writes + 1 - v
		if d < 1 || d > len(budgets) {
			return fmt.Sprintf("address %q is in set %d, beyond the %d sets", a, d, len(budgets))
		}
		counts[d-1]++
	}
	for d, c := range counts {
		if c != budgets[d] {
			return fmt.Sprintf("took %d addresses from set %d, whose budget is %d", c, d+1, budgets[d])
		}
	}
	return ""
}
