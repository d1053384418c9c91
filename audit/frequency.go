// Package audit judges a protocol from the adversary's view alone: the
// records of an observe.Tap. It holds the statistics and the generic
// checks that the obliviousness tests, `oblivkv tap` and `oblivkv audit`
// (cmd/oblivkv/internal/auditrun) share: the frequency-analysis attack
// that breaks "encryption alone", chi-square tests of uniformity,
// homogeneity, independence and goodness of fit with their stated power,
// Poisson excess counts, one key followed across its accesses, where
// blocks land and which slots reads choose, positions in batch calls and
// path reads that coincide, each a Check (auditspec.Check) with its
// statistic, its critical value and its p-value. A statistical check
// rejects a protocol at p = Significance; an injected leak must fail one
// at p = DecisiveP or below, far from the threshold.
//
// A protocol's own view of storage (the parser of its calls and the
// structural checks of its paper) lives in the protocol's package, which
// registers it for `oblivkv audit` (kv.Protocol.Audit) and builds its
// checks from these. The package sits below every protocol: it must never
// import one or name one.
//
// Everything here works on what the storage operator sees (addresses, ops,
// sizes, timing). It must never take plaintext, keys or protocol state as
// input, except as the attacker's stated prior knowledge (such as the key
// popularity ranking) or as ground truth for scoring an attack (which key
// a traced read was for, TracedRead).
package audit

import (
	"sort"

	"github.com/oblivkv/oblivkv/observe"
)

// AddrCount is how often one address was accessed.
type AddrCount struct {
	Addr  string
	Count int
}

// RankAddresses counts the addresses of every record of the given op
// (reads, say; 0 counts every op) and returns them most frequent first;
// ties break by address so the ranking is deterministic.
func RankAddresses(records []observe.Record, op observe.Op) []AddrCount {
	counts := map[string]int{}
	for _, r := range records {
		if op != 0 && r.Op != op {
			continue
		}
		for _, a := range r.Addrs {
			counts[a]++
		}
	}
	out := make([]AddrCount, 0, len(counts))
	for a, c := range counts {
		out = append(out, AddrCount{Addr: a, Count: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Addr < out[j].Addr
	})
	return out
}

// FrequencyAttack is the classic attack on deterministic encryption: an
// attacker who knows the key popularity ranking (most popular first) maps
// the i-th most frequently accessed address to the i-th most popular key.
// It returns the guess for each ranked address.
func FrequencyAttack(ranked []AddrCount, popularity []string) map[string]string {
	guess := make(map[string]string, len(ranked))
	for i, ac := range ranked {
		if i >= len(popularity) {
			break
		}
		guess[ac.Addr] = popularity[i]
	}
	return guess
}

// Recovered scores an attack: the share of the top n keys of popularity
// whose true address (truth maps key to address) was guessed right.
func Recovered(guess map[string]string, popularity []string, truth map[string]string, n int) float64 {
	n = min(n, len(popularity))
	if n == 0 {
		return 0
	}
	hits := 0
	for _, key := range popularity[:n] {
		if guess[truth[key]] == key {
			hits++
		}
	}
	return float64(hits) / float64(n)
}
