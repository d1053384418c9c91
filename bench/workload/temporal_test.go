package workload

import (
	"math"
	"slices"
	"testing"
)

// zipfPMF is P(k) of Zipf(n, s) over 1..n.
func zipfPMF(n uint64, s float64, k uint64) float64 {
	return math.Pow(float64(k), -s) / Zeta(n, s)
}

// near reports whether the share got/total is within 5 standard errors of
// the probability p (plus a hair for p near 0).
func near(got, total int, p float64) bool {
	sigma := math.Sqrt(p * (1 - p) / float64(total))
	return math.Abs(float64(got)/float64(total)-p) <= 5*sigma+1e-4
}

func TestZipfSamplerPMF(t *testing.T) {
	const n, draws = 50, 200_000
	for _, s := range []float64{0.3, 0.99, 1, 1.5, 3} {
		z := newZipfSampler(n, s)
		counts := make([]int, n+1)
		r := rng(11)
		for range draws {
			k := z.next(r)
			if k < 1 || k > n {
				t.Fatalf("s=%v: drew %d, want 1..%d", s, k, n)
			}
			counts[k]++
		}
		for _, k := range []uint64{1, 2, 3, 10, 50} {
			if p := zipfPMF(n, s, k); !near(counts[k], draws, p) {
				t.Errorf("s=%v: P(%d) = %.4f, want %.4f", s, k, float64(counts[k])/draws, p)
			}
		}
	}
	// One item: always 1.
	z, r := newZipfSampler(1, 1), rng(1)
	for range 100 {
		if k := z.next(r); k != 1 {
			t.Fatalf("n=1: drew %d", k)
		}
	}
}

// reuseDistances returns the LRU stack position (1 = most recent) of each
// entry of trace, or 0 for a record's first access in the trace (its
// position depends on the generator's hidden initial order). Records
// accessed in the trace are always above those not yet accessed, so a
// stack of the accessed records alone gives exact positions.
func reuseDistances(trace []uint64) []int {
	var stack []uint64 // most recent first
	out := make([]int, len(trace))
	for i, rec := range trace {
		p := slices.Index(stack, rec)
		if p >= 0 {
			out[i] = p + 1
			stack = slices.Delete(stack, p, p+1)
		}
		stack = slices.Insert(stack, 0, rec)
	}
	return out
}

// TestTemporalReuseDistances: the reuse distances of the generated trace
// follow the Zipf law the generator was asked for, measured by an
// independent LRU simulation.
func TestTemporalReuseDistances(t *testing.T) {
	const n, length = 200, 100_000
	share1 := map[float64]float64{}
	for _, s := range []float64{0.5, 1, 2} {
		tg, err := NewTemporal(n, s, length, 7)
		if err != nil {
			t.Fatal(err)
		}
		hist := make([]int, n+1)
		for _, d := range reuseDistances(tg.trace) {
			hist[d]++ // hist[0]: first accesses
		}
		if hist[0] > n {
			t.Fatalf("s=%v: %d first accesses of %d records", s, hist[0], n)
		}
		for _, d := range []uint64{1, 2, 3, 5, 20} {
			if p := zipfPMF(n, s, d); !near(hist[d], length, p) {
				t.Errorf("s=%v: share at distance %d = %.4f, want Zipf's %.4f", s, d, float64(hist[d])/length, p)
			}
		}
		share1[s] = float64(hist[1]) / length
	}
	// A steeper exponent concentrates on the most recent records.
	if !(share1[0.5] < share1[1] && share1[1] < share1[2]) || share1[2] < 3*share1[0.5] {
		t.Errorf("share at distance 1 by exponent: %v", share1)
	}
}

func TestTemporalSequence(t *testing.T) {
	a, err := New("temporal", 1000, Options{Seed: 3, TraceLength: 5000})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New("temporal", 1000, Options{Seed: 3, TraceLength: 8000})
	c, _ := New("temporal", 1000, Options{Seed: 4, TraceLength: 5000})
	ta, tb, tc := a.(*Temporal), b.(*Temporal), c.(*Temporal)
	if ta.Len() != 5000 || ta.s != DefaultTemporalExponent || ta.HasOps() {
		t.Fatalf("len %d, exponent %v, ops %v", ta.Len(), ta.s, ta.HasOps())
	}
	// A longer sequence from the same seed extends the shorter one.
	if !slices.Equal(ta.trace, tb.trace[:5000]) || slices.Equal(ta.trace, tc.trace) {
		t.Error("the sequence is not a function of the seed alone")
	}
	if r, _, ok := ta.At(5003); r != ta.trace[3] || ok {
		t.Errorf("At(5003) = %d, %v; want the wrapped entry 3 without an operation", r, ok)
	}
	for _, r := range ta.trace {
		if r >= 1000 {
			t.Fatalf("record %d of 1000", r)
		}
	}
	// Every record is reachable: a flat exponent touches them all.
	flat, _ := NewTemporal(50, 0.05, 20_000, 1)
	seen := map[uint64]bool{}
	for _, r := range flat.trace {
		seen[r] = true
	}
	if len(seen) != 50 {
		t.Errorf("%d of 50 records drawn", len(seen))
	}
	// One record: always record 0.
	one, _ := NewTemporal(1, 1, 10, 1)
	if !slices.Equal(one.trace, make([]uint64, 10)) {
		t.Errorf("one record: %v", one.trace)
	}
}

func TestTemporalRejects(t *testing.T) {
	for _, s := range []float64{-1, math.NaN(), math.Inf(1), 0} {
		if _, err := NewTemporal(10, s, 10, 1); err == nil {
			t.Errorf("exponent %v accepted", s)
		}
	}
	if _, err := New("temporal", 10, Options{TemporalExponent: -2}); err == nil {
		t.Error("negative exponent accepted through New")
	}
	if _, err := NewTemporal(10, 1, 0, 1); err == nil {
		t.Error("empty sequence accepted")
	}
}

func TestFenwickFind(t *testing.T) {
	f := newFenwick(10, 4) // slots 0..3 set
	f.add(2, -1)
	f.add(7, 1)
	for rank, want := range map[uint64]uint64{1: 0, 2: 1, 3: 3, 4: 7} {
		if got := f.find(rank); got != want {
			t.Errorf("find(%d) = %d, want %d", rank, got, want)
		}
	}
}

func TestCursorShared(t *testing.T) {
	tr, err := New("temporal", 100, Options{Seed: 1, TraceLength: 10})
	if err != nil {
		t.Fatal(err)
	}
	seq := tr.(Sequence)
	mix, _ := MixByName("A")
	cur := NewCursor(seq, mix, 7)
	a, b := cur.Chooser(), cur.Chooser()
	for i := range uint64(25) {
		want, _, _ := seq.At(i)
		if i%4 == 3 { // the cursor itself, with the entry's operation from the mix
			if op, rec := cur.Next(); rec != want || op != mix.entry(7, i) {
				t.Fatalf("entry %d: Next = %v %d, want %v %d", i, op, rec, mix.entry(7, i), want)
			}
			continue
		}
		c := a
		if i%3 == 0 {
			c = b
		}
		if c.Next() != want {
			t.Fatalf("entry %d: the two choosers do not share one cursor", i)
		}
	}
}
