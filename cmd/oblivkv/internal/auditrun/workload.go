package auditrun

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Workloads are the workloads an audit can run, in the order it reports
// them.
var Workloads = []string{"zipf", "uniform", "hotkey", "missing", "bursts"}

// DefaultWorkloads are those an audit runs unless told otherwise.
var DefaultWorkloads = []string{"zipf", "uniform", "hotkey"}

// ZipfS is the exponent of the zipf workload.
const ZipfS = 0.99

// keysOf returns the key (index in [0, records], records for a key never
// loaded) of each of the ops requests of workload name, drawn with seed;
// clients is the number of concurrent clients, a round of requests.
//
//   - zipf: key i is asked round(ops*p_i) times, p_i proportional to
//     1/(i+1)^ZipfS, in a random order: Zipf 0.99 with its expected
//     frequencies exactly, so that key i is the i-th most popular (ties
//     aside) and the popularity ranking the attacker knows is 0, 1, ...
//   - uniform: keys drawn uniformly.
//   - hotkey: key 0 every time.
//   - missing: a key never loaded, every time (its Puts are Deletes, so
//     that it never exists): a missing key must look like any other.
//   - bursts: all requests of a round of clients for one key, another
//     key every round (round r's is 37r mod records): repeats of a key
//     whose block is being read, among concurrent requests (one epoch of
//     a protocol that batches them by epoch), which must look like
//     distinct keys.
func keysOf(name string, records, ops, clients int, seed uint64) ([]int, error) {
	r := rand.New(rand.NewPCG(seed, uint64(len(name))))
	keys := make([]int, 0, ops)
	switch name {
	case "zipf":
		keys = zipfKeys(records, ops)
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	case "uniform":
		for range ops {
			keys = append(keys, r.IntN(records))
		}
	case "hotkey":
		keys = slices.Repeat([]int{0}, ops)
	case "missing":
		keys = slices.Repeat([]int{records}, ops)
	case "bursts":
		for i := range ops {
			keys = append(keys, i/clients*37%records)
		}
	default:
		return nil, fmt.Errorf("unknown workload %q (known: %v)", name, Workloads)
	}
	return keys, nil
}

// zipfKeys returns ops keys, key i round(ops*p_i) times in order, padded
// with key 0 or cut to ops.
func zipfKeys(records, ops int) []int {
	p := ZipfProbabilities(records)
	keys := make([]int, 0, ops)
	for i, pi := range p {
		for range int(math.Round(float64(ops) * pi)) {
			keys = append(keys, i)
		}
	}
	for len(keys) < ops {
		keys = append(keys, 0)
	}
	return keys[:ops]
}

// ZipfProbabilities returns p_i proportional to 1/(i+1)^ZipfS over n keys.
func ZipfProbabilities(n int) []float64 {
	p := make([]float64, n)
	total := 0.0
	for i := range p {
		p[i] = math.Pow(float64(i+1), -ZipfS)
		total += p[i]
	}
	for i := range p {
		p[i] /= total
	}
	return p
}
