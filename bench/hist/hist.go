// Package hist is a latency histogram in the style of HdrHistogram:
// log-linear buckets (256 linear sub-buckets per power of two) over int64
// values, so any recorded value is known to within 0.4% whatever its
// magnitude, recording is a few instructions with no allocation once a
// magnitude has been seen, and histograms merge by adding counts.
//
// It owns only counting. It must never read a clock: callers record
// durations they measured.
package hist

import (
	"math"
	"math/bits"
	"time"
)

const (
	subBits    = 8
	subBuckets = 1 << subBits // linear buckets per power of two
	groups     = 64 - subBits + 1
)

// Histogram counts non-negative values. The zero value is empty and ready;
// it is not safe for concurrent use (give each goroutine its own and Merge).
type Histogram struct {
	counts   [groups]*[subBuckets]uint64 // allocated on first use
	n        uint64
	sum      float64
	min, max int64
}

// Record adds one value; negative values count as 0.
func (h *Histogram) Record(v int64) {
	v = max(v, 0)
	g, s := index(uint64(v))
	if h.counts[g] == nil {
		h.counts[g] = new([subBuckets]uint64)
	}
	h.counts[g][s]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
	h.sum += float64(v)
}

// RecordDuration adds d in nanoseconds.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// index returns the group and sub-bucket of v. Group 0 holds 0..255
// exactly; group g >= 1 holds [256<<(g-1), 256<<g) in buckets of width
// 1<<(g-1).
func index(v uint64) (int, int) {
	if v < subBuckets {
		return 0, int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift + 1, int(v>>shift) - subBuckets
}

// bounds returns the smallest value of a bucket and its width.
func bounds(g, s int) (lo, width uint64) {
	if g == 0 {
		return uint64(s), 1
	}
	return uint64(s+subBuckets) << (g - 1), 1 << (g - 1)
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max are the exact extremes (0 when empty).
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest recorded value.
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q in [0, 1]: the middle of the
// bucket holding the ceil(q*n)-th smallest value, clamped to the exact
// minimum and maximum; the largest value is exact. It returns 0 when
// empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	if rank == h.n {
		return h.max
	}
	var seen uint64
	for g, c := range h.counts {
		if c == nil {
			continue
		}
		for s, k := range c {
			if seen += k; seen >= rank {
				lo, w := bounds(g, s)
				mid := int64(lo + (w-1)/2)
				return min(max(mid, h.min), h.max)
			}
		}
	}
	return h.max
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for g, c := range o.counts {
		if c == nil {
			continue
		}
		if h.counts[g] == nil {
			h.counts[g] = new([subBuckets]uint64)
		}
		for s, k := range c {
			h.counts[g][s] += k
		}
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}
