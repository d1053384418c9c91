package hist

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestIndexBoundsRoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 255, 256, 257, 511, 512, 513, 1000, 123456789, 1 << 40, math.MaxInt64} {
		g, s := index(v)
		lo, w := bounds(g, s)
		if v < lo || v-lo >= w {
			t.Errorf("%d: bucket (%d,%d) = [%d, %d)", v, g, s, lo, lo+w)
		}
		if v >= subBuckets && float64(w)/float64(lo) > 1.0/subBuckets+1e-12 {
			t.Errorf("%d: bucket width %d too wide for %d", v, w, lo)
		}
	}
}

func TestQuantilesMatchExactWithinPrecision(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	vals := make([]int64, 50_000)
	for i := range vals {
		// Log-normal-ish latencies from 10us to ~1s.
		vals[i] = int64(math.Exp(r.NormFloat64()*1.5+12)) + 1
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := h.Quantile(q)
		if rel := math.Abs(float64(got-exact)) / float64(exact); rel > 1.0/subBuckets {
			t.Errorf("q%.3f = %d, exact %d (%.3f%% off)", q, got, exact, 100*rel)
		}
	}
	if h.Quantile(1) != vals[len(vals)-1] || h.Max() != vals[len(vals)-1] || h.Min() != vals[0] {
		t.Errorf("extremes: q1 %d max %d min %d, want %d and %d", h.Quantile(1), h.Max(), h.Min(), vals[len(vals)-1], vals[0])
	}
	if h.Count() != uint64(len(vals)) {
		t.Errorf("count %d", h.Count())
	}
}

func TestSmallValuesExact(t *testing.T) {
	var h Histogram
	for v := range int64(100) {
		h.Record(v + 1)
	}
	if h.Quantile(0.5) != 50 || h.Quantile(0.99) != 99 || h.Mean() != 50.5 {
		t.Errorf("p50 %d p99 %d mean %v", h.Quantile(0.5), h.Quantile(0.99), h.Mean())
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram not zero")
	}
}

func TestMerge(t *testing.T) {
	var a, b, all Histogram
	for v := int64(1); v <= 10000; v++ {
		all.Record(v * 1000)
		if v%2 == 0 {
			a.Record(v * 1000)
		} else {
			b.Record(v * 1000)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if m.Quantile(q) != all.Quantile(q) {
			t.Errorf("q%v: merged %d, direct %d", q, m.Quantile(q), all.Quantile(q))
		}
	}
	if m.Count() != all.Count() || m.Min() != 1000 || m.Max() != 10_000_000 {
		t.Errorf("merged count %d min %d max %d", m.Count(), m.Min(), m.Max())
	}
}
