package bench

import (
	"context"
	"iter"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/bench/workload"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	_ "github.com/oblivkv/oblivkv/protocol/all"
)

// memOpener opens each protocol over a fresh in-memory backend.
func memOpener(t *testing.T) Opener {
	return func(ctx context.Context, protocol string) (Target, error) {
		s, err := kv.Open(ctx, kv.Config{Protocol: protocol, Backend: mem.New(), Keys: kvtest.NewKeys(t),
			Capacity: 1000, ValueSize: 128})
		if err != nil {
			return nil, err
		}
		return StoreTarget(s, func(context.Context) error { return s.Close() }), nil
	}
}

func config(t *testing.T, mix, dist string, records, ops int) Config {
	t.Helper()
	m, err := workload.MixByName(mix)
	if err != nil {
		t.Fatal(err)
	}
	d, err := workload.New(dist, uint64(records), workload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Mix: m, Keys: d, Records: records, Ops: ops, ValueSize: 100,
		Concurrency: 4, Seed: 42, Backend: "mem", Warmup: Warmup{Ops: ops / 10}}
}

func TestEndToEndPlainEncrypted(t *testing.T) {
	cfg := config(t, "C", "zipfian", 1000, 5000)
	res, err := Run(context.Background(), cfg, []string{"plain", "encrypted"}, memOpener(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Protocol != "plain" || res[1].Protocol != "encrypted" {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.Ops != 5000 || r.Reads != 5000 || r.Errors != 0 || r.Misses != 0 {
			t.Errorf("%s: ops %d reads %d errors %d (%s) misses %d", r.Protocol, r.Ops, r.Reads, r.Errors, r.FirstError, r.Misses)
		}
		if !(r.OpsPerSec > 0) || r.P50MS > r.P99MS || r.P99MS > r.MaxMS || r.P50MS <= 0 {
			t.Errorf("%s: ops/s %v p50 %v p99 %v max %v", r.Protocol, r.OpsPerSec, r.P50MS, r.P99MS, r.MaxMS)
		}
		if r.LogicalBytes != 5000*100 {
			t.Errorf("%s: logical payload %d bytes, want %d", r.Protocol, r.LogicalBytes, 5000*100)
		}
		if r.RoundTripsPerOp == nil || r.Amplification == nil || r.BytesPerOp == nil {
			t.Fatalf("%s: backend figures missing", r.Protocol)
		}
	}
	plain, enc := res[0], res[1]
	if rt := *plain.RoundTripsPerOp; rt < 0.95 || rt > 1.05 {
		t.Errorf("plain YCSB C: %.3f round trips per op, want 1", rt)
	}
	if a := *plain.Amplification; math.Abs(a-1) > 0.01 {
		t.Errorf("plain YCSB C: amplification %.3f, want 1", a)
	}
	if *enc.Amplification <= *plain.Amplification {
		t.Errorf("encrypted amplification %.3f not above plain's %.3f", *enc.Amplification, *plain.Amplification)
	}
}

func TestReadModifyWriteCounts(t *testing.T) {
	cfg := config(t, "F", "uniform", 500, 2000)
	r, err := RunOne(context.Background(), cfg, "plain", memOpener(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Reads+r.ReadModifyWrite != r.Ops || r.Updates != 0 || r.ReadModifyWrite == 0 {
		t.Fatalf("reads %d rmw %d updates %d ops %d", r.Reads, r.ReadModifyWrite, r.Updates, r.Ops)
	}
	// A read is one Get; a read-modify-write a Get and a Put.
	if want := r.Reads + 2*r.ReadModifyWrite; *r.BackendRoundTrips != want {
		t.Errorf("%d backend round trips, want %d", *r.BackendRoundTrips, want)
	}
	if want := 100 * (r.Reads + 2*r.ReadModifyWrite); r.LogicalBytes != want {
		t.Errorf("logical payload %d, want %d", r.LogicalBytes, want)
	}
}

func TestWarmupExcluded(t *testing.T) {
	cfg := config(t, "C", "uniform", 200, 1000)
	cfg.Warmup = Warmup{Ops: 700}
	var stores []kv.Store
	open := func(ctx context.Context, p string) (Target, error) {
		tg, err := memOpener(t)(ctx, p)
		if err != nil {
			return nil, err
		}
		stores = append(stores, tg.(*storeTarget).s)
		return tg, nil
	}
	r, err := RunOne(context.Background(), cfg, "plain", open)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops != 1000 || *r.BackendRoundTrips != 1000 {
		t.Errorf("measured %d ops, %d round trips; want 1000 of each", r.Ops, *r.BackendRoundTrips)
	}
	if total := stores[0].Stats().Gets; total != 1700 {
		t.Errorf("store served %d gets, want 1700 (warm-up + run)", total)
	}
}

// noLoader hides a store's bulk loader, so the load goes through Puts.
type noLoader struct{ kv.Store }

func TestLoadWithoutLoaderPutsEverything(t *testing.T) {
	cfg := config(t, "C", "uniform", 300, 100)
	var s kv.Store
	open := func(ctx context.Context, p string) (Target, error) {
		tg, err := memOpener(t)(ctx, p)
		if err != nil {
			return nil, err
		}
		s = tg.(*storeTarget).s
		return StoreTarget(noLoader{s}, func(context.Context) error { return nil }), nil
	}
	r, err := RunOne(context.Background(), cfg, "plain", open)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Puts != 300 || st.Keys != 300 || r.Misses != 0 {
		t.Errorf("load made %d puts, %d keys, run missed %d", st.Puts, st.Keys, r.Misses)
	}
}

// fake is a Target over a map, with a hook run before every Get.
type fake struct {
	mu      sync.Mutex
	m       map[string][]byte
	gets    int
	onGet   func(n int)
	failPut error
	log     []string // "r KEY" or "w KEY", in the order the run sent them
}

func newFake() *fake { return &fake{m: map[string][]byte{}} }

func (f *fake) Get(_ context.Context, key string) ([]byte, bool, error) {
	f.mu.Lock()
	f.gets++
	f.log = append(f.log, "r "+key)
	n, hook := f.gets, f.onGet
	v, ok := f.m[key]
	f.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return v, ok, nil
}

func (f *fake) Put(_ context.Context, key string, val []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failPut != nil {
		return f.failPut
	}
	f.log = append(f.log, "w "+key)
	f.m[key] = val
	return nil
}

func (f *fake) Load(_ context.Context, items iter.Seq2[string, []byte], _ int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, v := range items {
		f.m[k] = v
	}
	return nil
}

func (f *fake) Snapshot(context.Context) (Snapshot, error) { return Snapshot{}, nil }
func (f *fake) Close(context.Context) error                { return nil }

func fakeOpener(f *fake) Opener {
	return func(context.Context, string) (Target, error) { return f, nil }
}

func TestErrorsCountedNotMeasured(t *testing.T) {
	cfg := config(t, "A", "uniform", 100, 2000)
	f := newFake()
	f.failPut = errTest
	// Load goes through Load, which ignores failPut.
	r, err := RunOne(context.Background(), cfg, "fake", fakeOpener(f))
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors == 0 || r.Updates != 0 || r.Ops+r.Errors != 2000 || r.Ops != r.Reads {
		t.Errorf("ops %d reads %d updates %d errors %d", r.Ops, r.Reads, r.Updates, r.Errors)
	}
	if r.FirstError == "" || r.RoundTripsPerOp != nil || r.Amplification != nil {
		t.Errorf("first error %q, backend figures %v %v (want none from a target without counters)",
			r.FirstError, r.RoundTripsPerOp, r.Amplification)
	}
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("injected failure")

func TestOpenLoopRespectsRate(t *testing.T) {
	cfg := config(t, "C", "uniform", 100, 0)
	cfg.Duration, cfg.Rate, cfg.Warmup, cfg.Concurrency = time.Second, 2000, Warmup{}, 8
	r, err := RunOne(context.Background(), cfg, "plain", memOpener(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops < 1600 || r.Ops > 2400 {
		t.Errorf("%d ops in 1s at 2000 ops/s", r.Ops)
	}
	if r.OpsPerSec < 1600 || r.OpsPerSec > 2400 || r.Duration < 0.95 {
		t.Errorf("%.0f ops/s over %.2fs, want about 2000 over 1s", r.OpsPerSec, r.Duration)
	}
}

// A store that stalls once: the open loop must charge the stall to every
// operation that was due during it; the closed loop only to one.
func TestOpenLoopAvoidsCoordinatedOmission(t *testing.T) {
	run := func(rate float64) Result {
		cfg := config(t, "C", "uniform", 100, 500)
		cfg.Rate, cfg.Concurrency, cfg.Warmup = rate, 1, Warmup{}
		f := newFake()
		f.onGet = func(n int) {
			if n == 100 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		r, err := RunOne(context.Background(), cfg, "fake", fakeOpener(f))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	open, closed := run(1000), run(0)
	if open.P95MS < 20 {
		t.Errorf("open loop p95 %.2f ms: the stall's queueing is not in the latencies", open.P95MS)
	}
	if closed.P95MS > 20 || closed.MaxMS < 100 {
		t.Errorf("closed loop p95 %.2f ms, max %.2f ms: want one slow op", closed.P95MS, closed.MaxMS)
	}
}

func TestTimedClosedLoop(t *testing.T) {
	cfg := config(t, "B", "hotspot", 100, 0)
	cfg.Duration, cfg.Warmup = 200*time.Millisecond, Warmup{Duration: 50 * time.Millisecond}
	r, err := RunOne(context.Background(), cfg, "plain", memOpener(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops == 0 || r.Duration < 0.2 || r.Duration > 1 || r.Warmup != "50ms" {
		t.Errorf("ops %d over %.3fs, warm-up %s", r.Ops, r.Duration, r.Warmup)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	cfg := config(t, "C", "uniform", 100, 0)
	cfg.Duration = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Run(ctx, cfg, []string{"plain"}, memOpener(t)); err == nil {
		t.Error("cancelled run returned no error")
	}
	if time.Since(start) > 5*time.Second {
		t.Error("cancelled run did not stop")
	}
}

func TestParseWarmup(t *testing.T) {
	cases := []struct {
		in   string
		ops  int
		dur  time.Duration
		want Warmup
	}{
		{"", 1000, 0, Warmup{Ops: 100}},
		{"auto", 0, 10 * time.Second, Warmup{Duration: time.Second}},
		{"25%", 1000, 0, Warmup{Ops: 250}},
		{"500", 1000, 0, Warmup{Ops: 500}},
		{"2s", 1000, 0, Warmup{Duration: 2 * time.Second}},
		{"0", 1000, 0, Warmup{}},
	}
	for _, c := range cases {
		got, err := ParseWarmup(c.in, c.ops, c.dur)
		if err != nil || got != c.want {
			t.Errorf("ParseWarmup(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"x", "-1", "-2s", "a%"} {
		if _, err := ParseWarmup(bad, 10, 0); err == nil {
			t.Errorf("ParseWarmup(%q) accepted", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	good := config(t, "C", "uniform", 10, 10)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Config){
		"no ops":      func(c *Config) { c.Ops = 0 },
		"no records":  func(c *Config) { c.Records = 0 },
		"no workers":  func(c *Config) { c.Concurrency = 0 },
		"no value":    func(c *Config) { c.ValueSize = 0 },
		"bad rate":    func(c *Config) { c.Rate = -1 },
		"no keys":     func(c *Config) { c.Keys = nil },
		"neg warm-up": func(c *Config) { c.Warmup.Ops = -1 },
	} {
		c := good
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
