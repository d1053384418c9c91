package cloak

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/observe"
)

// BatchView is what ViewBatches finds in a tap log.
type BatchView struct {
	// Batches is the number of batches (Reads of physical addresses).
	Batches int
	// Violations describes every batch that did not take exactly b_d
	// addresses from set d for every d, or was not written back as read.
	Violations []string
	// Starts are the times the batches' Reads began, in order.
	Starts []time.Duration
}

// ViewBatches checks Cloak's budgets (Cloak Sec. 4) from a tap log
// alone, as the storage operator can: every Write of physical addresses
// forms a new reuse-distance set (the initial layout writes one set per
// Write, oldest first), so an address read when w Writes have been seen
// and last written by the v-th is in set d = w+1-v. Every batch must be a
// Read taking exactly budgets[d-1] addresses from set d for every d (and
// none from anywhere else), followed by a Write of the same addresses.
func ViewBatches(records []observe.Record, budgets []int) (BatchView, error) {
	var res BatchView
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
	return len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], AddrPrefix)
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

// Streaks tests that no address stays where the requests could find
// it: it counts runs of reads of one address in consecutive batches
// against what Cloak's budgets give by chance (audit.Excess). A batch writes
// its beta addresses back as the newest set, from which the next batch
// reads exactly b_1 = budgets[0]; as the elements were permuted at random
// (Cloak Sec. 5.1), which b_1 they are is independent of the
// requests, so an address read by one batch is read by the next with
// probability p = b_1/beta, and a run of consecutive batches reading it
// lasts r batches or more with probability p^(r-1). The statistic counts
// every length-th batch of every run; the expected count sums, over the
// runs' first reads, the chance of reaching each multiple of length
// before the log ends. A write-back that leaves every element where it
// was read keeps a key that clients use in every batch at one address,
// in a run as long as the clients keep at it.
func Streaks(name string, records []observe.Record, budgets []int, length int) audit.Check {
	p := float64(budgets[0]) / float64(sum(budgets))
	count, expected, batches := streaks(records, p, length)
	return audit.Excess(name, count, expected, fmt.Sprintf("runs of one address read by consecutive batches, counted once per %d batches in a row, over %d batches; p = b_1/beta = %.4f",
		length, batches, p))
}

// streaks returns Streaks' count, its expected value when each next
// batch reads an address with probability p, and the number of batches.
func streaks(records []observe.Record, p float64, length int) (count int, expected float64, batches int) {
	var reads [][]string
	for _, r := range records {
		if !r.Err && r.Op == observe.OpRead && cloakCall(r) {
			reads = append(reads, r.Addrs)
		}
	}
	// reach(m) is the expected count of a run that may last m batches.
	reach := func(m int) float64 {
		e := 0.0
		for j := length; j <= m; j += length {
			e += math.Pow(p, float64(j-1))
		}
		return e
	}
	run, prev := map[string]int{}, map[string]bool{}
	for t, addrs := range reads {
		cur := make(map[string]bool, len(addrs))
		for _, a := range addrs {
			cur[a] = true
			if !prev[a] {
				run[a] = 0
				expected += reach(len(reads) - t)
			}
			if run[a]++; run[a]%length == 0 {
				count++
			}
		}
		prev = cur
	}
	return count, expected, len(reads)
}

// Checkpoints checks the schedule of a journaled Cloak store's
// checkpoints (protocol/cloak, journal.go): after the two anchor writes
// of the store's creation and its bulk load, before any batch, an anchor
// write follows the write-back of every every-th batch and of no other
// batch, and comes after nothing else. It is exact: checkpoints due by
// journal records, which client writes add to, would tell storage how
// much the clients wrote. records must end before the store's Close,
// whose own checkpoint is not on the schedule; the anchor writes are not
// at Cloak's addresses, and the other Cloak checks ignore them.
func Checkpoints(name string, records []observe.Record, every int) audit.Check {
	var violations []string
	batches, loaded, anchors := 0, false, 0
	for i, r := range records {
		switch {
		case r.Op == observe.OpRead && len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], AddrPrefix):
			batches++
		case durable.IsAnchorWrite(r):
			if !loaded { // the creation's, then the load's, before any batch
				loaded = i > 0 && records[i-1].Op == observe.OpWrite && batches == 0 && anchors == 1
				anchors++
				continue
			}
			anchors++
			if batches%every != 0 || records[i-1].Op != observe.OpWrite || !strings.HasPrefix(records[i-1].Addrs[0], AddrPrefix) {
				violations = append(violations, fmt.Sprintf("call %d: an anchor write after batch %d", r.Seq, batches))
			}
		}
	}
	if want := 2 + batches/every; anchors != want {
		violations = append(violations, fmt.Sprintf("%d anchor writes over %d batches; want %d", anchors, batches, want))
	}
	c := audit.Exact(fmt.Sprintf("%s: a checkpoint every %d batches", name, every), violations)
	if len(violations) == 0 {
		c.Detail = fmt.Sprintf("%d checkpoints over %d batches", anchors-2, batches)
	}
	return c
}
