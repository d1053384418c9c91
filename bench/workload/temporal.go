package workload

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
)

// Temporal is the synthetic temporally-distributed trace of Cloak (Sec.
// 7.1): "we repeatedly sample a value from a Zipf distribution and query
// the element whose current reuse distance equals the sampled value,
// updating all reuse distances after each query."
//
// Reuse distance is a record's position in the LRU stack of all n
// records: 1 is the most recently accessed record (so a draw of 1 repeats
// the previous access), 2 the one accessed before it, and so on; a
// record's distance is one more than the number of distinct other records
// accessed since its last access. Distances are drawn from Zipf(n, s):
// P(d) = d^-s / H(n, s), d = 1..n. Before the first access the stack is a
// random permutation of the records drawn from the seed, so record
// numbers (and key order) say nothing about initial recency.
//
// The whole sequence (Len entries) is generated when the distribution is
// built, in O(log n) per entry: a Fenwick tree over access times, with a 1
// at each record's last access, finds the record at distance d as the
// (n-d+1)-th set time. The time axis is 2n slots, compacted (O(n)) every n
// accesses, so memory is O(n) plus 8 bytes per entry. A run that needs
// more entries than Len wraps to the first; distances at the seam do not
// follow the law.
type Temporal struct {
	n     uint64
	s     float64
	trace []uint64
}

// temporalStream is the PCG stream of the temporal generator (workers use
// streams 0..concurrency-1, bench's load 1<<62).
const temporalStream = 1<<62 + 1

// NewTemporal generates length entries over n records with Zipf exponent
// s, seeded with seed.
func NewTemporal(n uint64, s float64, length int, seed uint64) (*Temporal, error) {
	if n == 0 {
		return nil, fmt.Errorf("workload: temporal generator over no records")
	}
	if !(s > 0) || math.IsInf(s, 0) {
		return nil, fmt.Errorf("workload: the temporal Zipf exponent must be a positive finite number, got %v", s)
	}
	if length < 1 {
		return nil, fmt.Errorf("workload: the temporal trace needs at least one entry, got %d", length)
	}
	r := rand.New(rand.NewPCG(seed, temporalStream))
	return &Temporal{n: n, s: s, trace: generateTemporal(n, s, length, r)}, nil
}

// Name implements Distribution.
func (*Temporal) Name() string { return "temporal" }

// Describe is a one-line description of the generator.
func (t *Temporal) Describe() string {
	return fmt.Sprintf("temporal (Zipf s=%g reuse distances, %d-entry sequence)", t.s, len(t.trace))
}

// Len implements Sequence.
func (t *Temporal) Len() uint64 { return uint64(len(t.trace)) }

// At implements Sequence: the temporal generator carries no operations.
func (t *Temporal) At(i uint64) (uint64, Op, bool) { return t.trace[i%uint64(len(t.trace))], 0, false }

// HasOps implements Sequence.
func (*Temporal) HasOps() bool { return false }

// Worker implements Distribution: a cursor of its own over the sequence.
func (t *Temporal) Worker(int, *rand.Rand) Chooser { return sequenceWorker(t) }

// generateTemporal draws length records; see Temporal.
func generateTemporal(n uint64, s float64, length int, r *rand.Rand) []uint64 {
	const free = math.MaxUint64
	zipf := newZipfSampler(n, s)
	slots := 2 * n
	at := make([]uint64, slots) // record whose last access is at this time, or free
	for i := range n {
		at[i] = i
	}
	r.Shuffle(int(n), func(i, j int) { at[i], at[j] = at[j], at[i] })
	for i := n; i < slots; i++ {
		at[i] = free
	}
	fw := newFenwick(slots, n)
	now := n // next access time
	out := make([]uint64, length)
	for j := range out {
		if now == slots { // compact: the n live times become 0..n-1, in order
			live := uint64(0)
			for _, rec := range at {
				if rec != free {
					at[live] = rec
					live++
				}
			}
			for i := live; i < slots; i++ {
				at[i] = free
			}
			fw = newFenwick(slots, n)
			now = n
		}
		d := zipf.next(r)       // 1..n
		t := fw.find(n - d + 1) // the (n-d+1)-th oldest live time
		rec := at[t]
		at[t] = free
		fw.add(t, -1)
		at[now] = rec
		fw.add(now, 1)
		now++
		out[j] = rec
	}
	return out
}

// fenwick is a binary indexed tree of counts over slots 0..len-1.
type fenwick []int32

// newFenwick returns a tree over size slots whose first ones slots hold 1.
func newFenwick(size, ones uint64) fenwick {
	f := make(fenwick, size+1) // 1-based
	for i := uint64(1); i <= ones; i++ {
		f[i] = 1
	}
	for i := uint64(1); i <= size; i++ {
		if j := i + i&-i; j <= size {
			f[j] += f[i]
		}
	}
	return f
}

func (f fenwick) add(slot uint64, delta int32) {
	for i := slot + 1; i < uint64(len(f)); i += i & -i {
		f[i] += delta
	}
}

// find returns the slot holding the rank-th 1 (rank from 1), counting
// from slot 0; rank must not exceed the total.
func (f fenwick) find(rank uint64) uint64 {
	size := uint64(len(f) - 1)
	pos := uint64(0)
	rem := int64(rank)
	for step := uint64(1) << (bits.Len64(size) - 1); step > 0; step >>= 1 {
		if next := pos + step; next <= size && int64(f[next]) < rem {
			pos = next
			rem -= int64(f[next])
		}
	}
	return pos // 1-based pos+1 is slot pos
}

// zipfSampler draws 1..n with P(k) = k^-s / H(n, s), for any s > 0.
//
// The Zipfian of zipfian.go cannot serve here: Gray et al.'s method needs
// 0 < theta < 1 (its alpha is 1/(1-theta)) and is a continuous
// approximation past the first two ranks, while Cloak's workload is s = 1,
// --temporal-s takes any s > 0, and the reuse distances are meant to
// follow the law itself. math/rand's Zipf needs s > 1. The Zipfian stays
// as it is for zipfian and latest, whose draws are YCSB's.
//
// This is the rejection-inversion method of Hörmann and Derflinger,
// "Rejection-inversion to generate variates from monotone discrete
// distributions" (1996), as in Apache Commons' ZipfDistribution: O(1)
// expected per draw, no table.
type zipfSampler struct {
	n                       uint64
	s                       float64
	hIntegralX1, hIntegralN float64
	threshold               float64
}

func newZipfSampler(n uint64, s float64) *zipfSampler {
	z := &zipfSampler{n: n, s: s}
	z.hIntegralX1 = z.hIntegral(1.5) - 1
	z.hIntegralN = z.hIntegral(float64(n) + 0.5)
	z.threshold = 2 - z.hIntegralInverse(z.hIntegral(2.5)-z.h(2))
	return z
}

func (z *zipfSampler) next(r *rand.Rand) uint64 {
	for {
		u := z.hIntegralN + r.Float64()*(z.hIntegralX1-z.hIntegralN)
		x := z.hIntegralInverse(u)
		k := math.Floor(x + 0.5)
		k = min(max(k, 1), float64(z.n))
		if k-x <= z.threshold || u >= z.hIntegral(k+0.5)-z.h(k) {
			return uint64(k)
		}
	}
}

// h is x^-s.
func (z *zipfSampler) h(x float64) float64 { return math.Exp(-z.s * math.Log(x)) }

// hIntegral is an antiderivative of h: (x^(1-s) - 1) / (1-s), or log x
// when s = 1.
func (z *zipfSampler) hIntegral(x float64) float64 {
	logX := math.Log(x)
	return expm1Over((1-z.s)*logX) * logX
}

// hIntegralInverse inverts hIntegral.
func (z *zipfSampler) hIntegralInverse(x float64) float64 {
	t := max(x*(1-z.s), -1) // rounding can push t below -1
	return math.Exp(log1pOver(t) * x)
}

// log1pOver is log(1+x)/x, continuous at 0.
func log1pOver(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Log1p(x) / x
	}
	return 1 - x*(1.0/2-x*(1.0/3-x*(1.0/4)))
}

// expm1Over is (e^x - 1)/x, continuous at 0.
func expm1Over(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Expm1(x) / x
	}
	return 1 + x*(1.0/2)*(1+x*(1.0/3)*(1+x*(1.0/4)))
}
