package auditrun

import (
	"fmt"

	"gonum.org/v1/gonum/mathext"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/observe"
)

// AttackTop is how many of the most popular keys the attacker is scored on.
const AttackTop = 100

// Attack is the frequency-analysis attacker's score on a zipf run.
type Attack struct {
	Accuracy float64 // share of the AttackTop most popular keys recovered
	Chance   float64 // the share expected when requests' calls say nothing of their keys
	Bound    float64 // the largest share chance gives but with probability audit.Significance
	Check    audit.Check
	Named    []string // the address the attacker names for each key, most popular first
}

// attack scores audit.FrequencyAttack on run, a zipf run whose key i is
// the i-th most popular. The attacker sees only the Tap log: it ranks the
// addresses by how many calls touched them and names the i-th most
// touched address as key i's (the attack on deterministic encryption).
//
// Scoring uses the run's ground truth, which the attacker never sees:
// key i is recovered when the address named for it was touched while
// more than half of key i's requests were in flight. Chance is the
// expected number recovered if every request's calls were independent of
// its key, which is what an oblivious protocol promises: with f(a) the
// share of all requests during which a was touched and n_i key i's
// requests, key i is then recovered with probability
// P(Binomial(n_i, f(a_i)) > n_i/2), and chance sums these. The count
// recovered is then a sum of independent trials, close to Poisson
// (audit.Excess), whose critical value at audit.Significance is the bound.
// The sum is taken over the keys asked at least once.
func attack(run *Run) Attack {
	ranked := audit.RankAddresses(run.Records, 0)
	n := min(AttackTop, len(ranked))
	named := make([]string, n)
	rankOf := map[string]int{}
	for i := range n {
		named[i] = ranked[i].Addr
		rankOf[named[i]] = i
	}
	touched, asked, hits := windows(run, rankOf, n)
	recovered, expected := 0, 0.0
	for i := range n {
		if asked[i] == 0 {
			continue
		}
		if 2*hits[i] > asked[i] {
			recovered++
		}
		expected += majority(asked[i], float64(touched[i])/float64(len(run.Requests)))
	}
	c := audit.Excess(fmt.Sprintf("%s: frequency attack, top %d keys recovered", run.Workload, n), recovered, expected,
		fmt.Sprintf("%d of %d keys recovered; chance %.2f keys, from how often each named address is touched", recovered, n, expected))
	return Attack{Accuracy: float64(recovered) / float64(n), Chance: expected / float64(n),
		Bound: c.Critical / float64(n), Check: c, Named: named}
}

// windows returns, for each of the n named addresses (by rank), how many
// requests had it touched while in flight (touched), how many requests
// asked for key i (asked), and how many of those had key i's named
// address touched (hits).
func windows(run *Run, rankOf map[string]int, n int) (touched, asked, hits []int) {
	touched, asked, hits = make([]int, n), make([]int, n), make([]int, n)
	first := uint64(0)
	if len(run.Records) > 0 {
		first = run.Records[0].Seq
	}
	seen := make([]int, n) // last request (+1) that touched each named address
	for ri, rq := range run.Requests {
		for seq := max(rq.From+1, first); seq <= rq.To; seq++ {
			for _, a := range run.Records[seq-first].Addrs {
				if i, ok := rankOf[a]; ok && seen[i] != ri+1 {
					seen[i] = ri + 1
					touched[i]++
				}
			}
		}
		if k := rq.Key; k < n {
			asked[k]++
			if seen[k] == ri+1 {
				hits[k]++
			}
		}
	}
	return touched, asked, hits
}

// majority is P(Binomial(n, p) > n/2).
func majority(n int, p float64) float64 {
	m := n/2 + 1
	switch {
	case p <= 0:
		return 0
	case p >= 1:
		return 1
	}
	return mathext.RegIncBeta(float64(m), float64(n-m+1), p)
}

// unitCounts returns how many calls of records touched each unit of
// storage, unit(addr) naming an address's unit: a call touching several
// addresses of one unit counts once.
func unitCounts(records []observe.Record, unit func(string) string) []int {
	counts := map[string]int{}
	seen := map[string]bool{}
	for _, r := range records {
		clear(seen)
		for _, a := range r.Addrs {
			if u := unit(a); !seen[u] {
				seen[u] = true
				counts[u]++
			}
		}
	}
	out := make([]int, 0, len(counts))
	for _, c := range counts {
		out = append(out, c)
	}
	return out
}

// unitOf returns how the comparison of calls per unit of storage groups
// the addresses of the protocol of spec: by its registration's Unit, or
// each address its own unit.
func unitOf(spec auditspec.Spec) func(string) string {
	if spec.Unit != nil {
		return spec.Unit
	}
	return sameAddress
}

// sameAddress makes each address its own unit.
func sameAddress(addr string) string { return addr }
