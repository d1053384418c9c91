package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Zipfian draws 0..n-1 with P(i) proportional to 1/(i+1)^theta, so 0 is the
// most popular item. It is the algorithm of Gray et al., "Quickly
// Generating Billion-Record Synthetic Databases" (SIGMOD 1994), as in YCSB's
// ZipfianGenerator: zeta(n, theta) is computed once (O(n), a fraction of a
// second for 10M items) and every draw is O(1).
type Zipfian struct {
	n          uint64
	theta      float64
	alpha      float64 // 1 / (1 - theta)
	zetan      float64 // zeta(n, theta)
	eta        float64
	halfPowTh  float64 // 0.5^theta
	zeta2theta float64
}

// NewZipfian precomputes the zipfian over n items with constant theta,
// 0 < theta < 1.
func NewZipfian(n uint64, theta float64) (*Zipfian, error) {
	if n == 0 {
		return nil, fmt.Errorf("workload: zipfian over no items")
	}
	if !(theta > 0 && theta < 1) {
		return nil, fmt.Errorf("workload: zipfian constant must be in (0, 1), got %v", theta)
	}
	z := &Zipfian{n: n, theta: theta, alpha: 1 / (1 - theta), zetan: Zeta(n, theta),
		halfPowTh: math.Pow(0.5, theta), zeta2theta: Zeta(2, theta)}
	z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - z.zeta2theta/z.zetan)
	return z, nil
}

// Zeta returns sum_{i=1..n} 1/i^theta.
func Zeta(n uint64, theta float64) float64 {
	var sum float64
	for i := uint64(1); i <= n; i++ {
		sum += math.Pow(float64(i), -theta)
	}
	return sum
}

// Next draws one item with r.
func (z *Zipfian) Next(r *rand.Rand) uint64 {
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < 1+z.halfPowTh {
		return min(1, z.n-1)
	}
	v := uint64(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return min(v, z.n-1)
}

// TopShare is the theoretical probability of the most popular item,
// 1/zeta(n, theta).
func (z *Zipfian) TopShare() float64 { return 1 / z.zetan }

// ScrambledZipfian is YCSB's ScrambledZipfianGenerator over n records: a
// zipfian draw (theta 0.99 by default) hashed with YCSB's 64-bit FNV-1 of
// the draw's 8 bytes, modulo n, so the popular items are scattered over
// the key space instead of being records 0, 1, 2...
//
// One deliberate difference: YCSB draws from a zipfian over 10^10 items
// (with a hard-coded zeta) before taking the hash modulo n; here the
// zipfian is over exactly n items, so the popularity of the hottest record
// is the textbook 1/zeta(n, theta). As in YCSB, the hash modulo n is not a
// bijection: a few ranks share a record and some records are never drawn.
type ScrambledZipfian struct{ z *Zipfian }

// NewScrambledZipfian builds the scrambled zipfian over n records.
func NewScrambledZipfian(n uint64, theta float64) (*ScrambledZipfian, error) {
	z, err := NewZipfian(n, theta)
	if err != nil {
		return nil, err
	}
	return &ScrambledZipfian{z: z}, nil
}

// Name implements Distribution.
func (*ScrambledZipfian) Name() string { return "zipfian" }

// Worker implements Distribution.
func (s *ScrambledZipfian) Worker(_ int, r *rand.Rand) Chooser {
	return chooserFunc(func() uint64 { return Scramble(s.z.Next(r), s.z.n) })
}

// Scramble maps a zipfian rank to a record as YCSB does:
// |fnvhash64(rank)| mod n.
func Scramble(rank, n uint64) uint64 { return FNVHash64(rank) % n }

// FNVHash64 is YCSB's Utils.fnvhash64: FNV-1 over the 8 little-endian
// bytes of v, then the absolute value of the result as a signed 64-bit
// number.
func FNVHash64(v uint64) uint64 {
	const (
		offsetBasis = 0xCBF29CE484222325
		prime       = 1099511628211
	)
	h := uint64(offsetBasis)
	for range 8 {
		h ^= v & 0xff
		v >>= 8
		h *= prime
	}
	if s := int64(h); s < 0 {
		return uint64(-s) // Java's Math.abs; MinInt64 stays 1<<63
	}
	return h
}

// Latest is YCSB's SkewedLatestGenerator for a fixed record set: the most
// recently inserted records are the most popular, record n-1-k having the
// popularity of zipfian rank k. YCSB counts recency by insertion order
// (the insert counter), and the A, B, C and F workloads insert nothing
// after the load, which inserts records 0..n-1 in order; so this is exactly
// what YCSB does for them: the last-loaded records stay hot, updates do
// not move the hot spot.
type Latest struct{ z *Zipfian }

// NewLatest builds the latest distribution over n records.
func NewLatest(n uint64, theta float64) (*Latest, error) {
	z, err := NewZipfian(n, theta)
	if err != nil {
		return nil, err
	}
	return &Latest{z: z}, nil
}

// Name implements Distribution.
func (*Latest) Name() string { return "latest" }

// Worker implements Distribution.
func (l *Latest) Worker(_ int, r *rand.Rand) Chooser {
	return chooserFunc(func() uint64 { return l.z.n - 1 - l.z.Next(r) })
}
