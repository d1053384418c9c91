package workload

import (
	"math"
	"math/rand/v2"
	"testing"
)

const draws = 100_000

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

func TestMixProportions(t *testing.T) {
	for _, name := range Mixes() {
		m, err := MixByName(name)
		if err != nil {
			t.Fatal(err)
		}
		var got [numOps]int
		r := rng(1)
		for range draws {
			got[m.Next(r)]++
		}
		for op, want := range m.Proportions {
			share := float64(got[op]) / draws
			if math.Abs(share-want) > 0.01 {
				t.Errorf("workload %s: %v share %.4f, want %.2f", name, Op(op), share, want)
			}
		}
	}
}

func TestMixByName(t *testing.T) {
	m, err := MixByName("f")
	if err != nil || m.Name != "F" || !m.Writes() {
		t.Fatalf("MixByName(f) = %+v, %v", m, err)
	}
	if c, _ := MixByName("C"); c.Writes() {
		t.Error("workload C writes")
	}
	if _, err := MixByName("E"); err == nil {
		t.Error("unknown workload E accepted")
	}
}

func TestZipfianTopShare(t *testing.T) {
	const n = 1000
	z, err := NewZipfian(n, DefaultTheta)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, n)
	r := rng(2)
	for range draws {
		counts[z.Next(r)]++
	}
	top := float64(counts[0]) / draws
	if want := z.TopShare(); math.Abs(top-want) > 0.1*want {
		t.Errorf("share of item 0 = %.4f, want about 1/zeta = %.4f", top, want)
	}
	// Rank 1 has probability 1/(2^theta zeta); popularity falls with rank.
	if want := math.Pow(2, -DefaultTheta) / z.zetan; math.Abs(float64(counts[1])/draws-want) > 0.1*want {
		t.Errorf("share of item 1 = %.4f, want %.4f", float64(counts[1])/draws, want)
	}
	if counts[0] <= counts[10] || counts[10] <= counts[500] {
		t.Errorf("popularity not decreasing: item 0 %d, 10 %d, 500 %d", counts[0], counts[10], counts[500])
	}
}

func TestZipfianEdges(t *testing.T) {
	for _, n := range []uint64{1, 2, 3} {
		z, err := NewZipfian(n, DefaultTheta)
		if err != nil {
			t.Fatal(err)
		}
		r := rng(3)
		for range 1000 {
			if v := z.Next(r); v >= n {
				t.Fatalf("n=%d: drew %d", n, v)
			}
		}
	}
	if _, err := NewZipfian(10, 1); err == nil {
		t.Error("theta 1 accepted")
	}
}

func TestScrambledZipfianSpreadsHotItems(t *testing.T) {
	const n = 10_000
	d, err := New("zipfian", n, Options{})
	if err != nil {
		t.Fatal(err)
	}
	counts := shares(d, n, 4)
	// The ten hottest records must not be the ten first ones, and must be
	// spread over the key space.
	hot := topK(counts, 10)
	var inFirst, lowHalf int
	for _, i := range hot {
		if i < 10 {
			inFirst++
		}
		if i < n/2 {
			lowHalf++
		}
	}
	if inFirst > 1 || lowHalf == 0 || lowHalf == 10 {
		t.Errorf("hottest records %v: not scrambled", hot)
	}
	// Still skewed: the hottest record gets about 1/zeta of the draws.
	z, _ := NewZipfian(n, DefaultTheta)
	if top := float64(counts[hot[0]]) / draws; top < 0.9*z.TopShare() {
		t.Errorf("hottest record share %.4f, want at least about %.4f", top, z.TopShare())
	}
	if counts[hot[0]] != counts[Scramble(0, n)] {
		t.Errorf("hottest record is %d, want Scramble(0) = %d", hot[0], Scramble(0, n))
	}
}

func TestFNVHash64MatchesYCSB(t *testing.T) {
	// FNV-1 64 of eight zero bytes, as YCSB computes it for rank 0.
	h := uint64(0xCBF29CE484222325)
	for range 8 {
		h *= 1099511628211
	}
	if int64(h) < 0 {
		h = uint64(-int64(h))
	}
	if got := FNVHash64(0); got != h {
		t.Errorf("FNVHash64(0) = %#x, want %#x", got, h)
	}
	if FNVHash64(1) == FNVHash64(256) {
		t.Error("FNVHash64 ignores byte position")
	}
	for _, v := range []uint64{0, 1, 12345, math.MaxUint64} {
		if FNVHash64(v) > math.MaxInt64+1 {
			t.Errorf("FNVHash64(%d) not an absolute value", v)
		}
	}
}

func TestLatestFavoursLastRecords(t *testing.T) {
	const n = 1000
	d, err := New("latest", n, Options{})
	if err != nil {
		t.Fatal(err)
	}
	counts := shares(d, n, 5)
	z, _ := NewZipfian(n, DefaultTheta)
	if top := float64(counts[n-1]) / draws; math.Abs(top-z.TopShare()) > 0.1*z.TopShare() {
		t.Errorf("last record share %.4f, want about %.4f", top, z.TopShare())
	}
	if counts[n-1] <= counts[n-10] || counts[n-10] <= counts[0] {
		t.Errorf("recency not favoured: %d, %d, %d", counts[n-1], counts[n-10], counts[0])
	}
}

func TestHotspotShares(t *testing.T) {
	const n = 1000
	d, err := New("hotspot", n, Options{})
	if err != nil {
		t.Fatal(err)
	}
	counts := shares(d, n, 6)
	hotSet := d.(*Hotspot).HotSet()
	if hotSet != 200 {
		t.Fatalf("hot set %d records, want 200", hotSet)
	}
	var hot int
	for i := range hotSet {
		hot += counts[i]
	}
	if share := float64(hot) / draws; math.Abs(share-DefaultHotOpFraction) > 0.01 {
		t.Errorf("hot set got %.4f of the operations, want %.2f", share, DefaultHotOpFraction)
	}
	d, _ = New("hotspot", n, Options{HotSetFraction: 0.5, HotOpFraction: 0.5})
	counts = shares(d, n, 6)
	for _, i := range []int{0, 499, 500, 999} {
		if c := float64(counts[i]) / draws; math.Abs(c-0.001) > 0.0004 {
			t.Errorf("50/50 hotspot: record %d share %.5f, want 0.001", i, c)
		}
	}
}

func TestUniformShares(t *testing.T) {
	const n = 10
	d, _ := New("uniform", n, Options{})
	for i, c := range shares(d, n, 7) {
		if share := float64(c) / draws; math.Abs(share-0.1) > 0.01 {
			t.Errorf("record %d share %.4f, want 0.1", i, share)
		}
	}
}

func TestDeterministicBySeed(t *testing.T) {
	for _, name := range Distributions() {
		build := func(seed uint64) Distribution {
			d, err := New(name, 5000, Options{Seed: seed, TraceLength: 5000})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		d := build(9)
		a, b, c := d.Worker(0, rng(9)), d.Worker(0, rng(9)), d.Worker(0, rng(10))
		if _, ok := d.(Sequence); ok { // one sequence per run: seeded when built
			a, b, c = d.Worker(0, nil), d.Worker(1, nil), build(10).Worker(0, nil)
		}
		same, differ := true, false
		for range 1000 {
			x, y, z := a.Next(), b.Next(), c.Next()
			same = same && x == y
			differ = differ || x != z
		}
		if !same || !differ {
			t.Errorf("%s: same seed same stream %v, other seed other stream %v", name, same, differ)
		}
	}
	v1, v2 := Value(rng(1), 13), Value(rng(1), 13)
	if string(v1) != string(v2) || len(v1) != 13 || string(v1) == string(Value(rng(2), 13)) {
		t.Error("Value is not a deterministic function of the seed")
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New("pareto", 10, Options{}); err == nil {
		t.Error("unknown distribution accepted")
	}
	if _, err := New("uniform", 0, Options{}); err == nil {
		t.Error("zero records accepted")
	}
	if _, err := New("hotspot", 10, Options{HotOpFraction: 2}); err == nil {
		t.Error("hot op fraction 2 accepted")
	}
}

func TestKeys(t *testing.T) {
	k := NewKeys(1000)
	if got := k.Key(7); got != "user007" {
		t.Errorf("Key(7) = %q, want user007", got)
	}
	if got := k.Key(999); got != "user999" {
		t.Errorf("Key(999) = %q", got)
	}
	if got := NewKeys(1).Key(0); got != "user0" {
		t.Errorf("one record: %q", got)
	}
}

func shares(d Distribution, n int, seed uint64) []int {
	counts := make([]int, n)
	c := d.Worker(0, rng(seed))
	for range draws {
		counts[c.Next()]++
	}
	return counts
}

// topK returns the indexes of the k largest counts, largest first.
func topK(counts []int, k int) []uint64 {
	var out []uint64
	used := map[int]bool{}
	for range k {
		best := -1
		for i, c := range counts {
			if !used[i] && (best < 0 || c > counts[best]) {
				best = i
			}
		}
		used[best] = true
		out = append(out, uint64(best))
	}
	return out
}

func TestKeyAllocatesOnce(t *testing.T) {
	k := NewKeys(1_000_000)
	if n := testing.AllocsPerRun(100, func() { _ = k.Key(4242) }); n != 1 {
		t.Errorf("Key allocates %v times, want 1", n)
	}
	if got := k.Key(4242); got != "user004242" {
		t.Errorf("Key(4242) = %q", got)
	}
}
