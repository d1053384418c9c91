package bench

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/bench/workload"
	"github.com/oblivkv/oblivkv/kv"
)

const sampleTrace = `# key op
apple r
banana w
apple r
cherry,put
# a comment in the middle

banana GET
durian update
`

func traceConfig(t *testing.T, text string, ops int) Config {
	t.Helper()
	tr, err := workload.ParseTrace(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(t, "C", "uniform", 1, ops)
	cfg.Keys, cfg.Records, cfg.Concurrency, cfg.Warmup = tr, int(tr.Records()), 1, Warmup{}
	return cfg
}

// TestTraceReplayInOrder: one worker replays the trace's entries and
// operations in order, wrapping at the end, over exactly the trace's keys.
func TestTraceReplayInOrder(t *testing.T) {
	cfg := traceConfig(t, sampleTrace, 15)
	f := newFake()
	r, err := RunOne(context.Background(), cfg, "fake", fakeOpener(f))
	if err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(maps.Keys(f.m)); !slices.Equal(keys, []string{"apple", "banana", "cherry", "durian"}) {
		t.Errorf("loaded keys %q", keys)
	}
	round := []string{"r apple", "w banana", "r apple", "w cherry", "r banana", "w durian"}
	want := slices.Concat(round, round, round[:3])
	if !slices.Equal(f.log, want) {
		t.Errorf("replayed\n%q\nwant\n%q", f.log, want)
	}
	if r.Workload != "trace" || r.Distribution != "trace" || r.Reads != 8 || r.Updates != 7 || r.Misses != 0 {
		t.Errorf("workload %s, distribution %s, reads %d, updates %d, misses %d",
			r.Workload, r.Distribution, r.Reads, r.Updates, r.Misses)
	}
	if d := Describe(cfg); !strings.Contains(d, "workload trace, trace trace (6 entries over 4 keys, operations from the file)") {
		t.Errorf("description %q", d)
	}
}

// TestTraceReplayPlain: a trace run on the plain protocol loads exactly the
// trace's keys, and the store serves the trace's gets and puts, warm-up
// included, whatever the concurrency.
func TestTraceReplayPlain(t *testing.T) {
	cfg := traceConfig(t, sampleTrace, 60)
	cfg.Concurrency, cfg.Warmup = 4, Warmup{Ops: 12}
	var s kv.Store
	open := func(ctx context.Context, p string) (Target, error) {
		tg, err := memOpener(t)(ctx, p)
		if err != nil {
			return nil, err
		}
		s = tg.(*storeTarget).s
		return StoreTarget(s, func(context.Context) error { return nil }), nil
	}
	r, err := RunOne(context.Background(), cfg, "plain", open)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 72 entries = 12 rounds of 3 reads and 3 updates.
	if st := s.Stats(); st.Keys != 4 || st.Gets != 36 || st.Puts != 36 {
		t.Errorf("store: %d keys, %d gets, %d puts; want 4, 36, 36", st.Keys, st.Gets, st.Puts)
	}
	if r.Reads != 30 || r.Updates != 30 || r.Misses != 0 || r.Errors != 0 {
		t.Errorf("measured reads %d updates %d misses %d errors %d (%s)", r.Reads, r.Updates, r.Misses, r.Errors, r.FirstError)
	}
	for _, k := range []string{"apple", "banana", "cherry", "durian"} {
		if _, ok, err := s.Get(context.Background(), k); !ok || err != nil {
			t.Errorf("key %s not loaded: %v", k, err)
		}
	}
	if _, ok, _ := s.Get(context.Background(), workload.NewKeys(4).Key(0)); ok {
		t.Error("the default record keys were loaded too")
	}
}

// TestSequenceWithoutOpsUsesMix: a sequence without operations takes them
// from the mix, per entry, so the counts do not depend on the concurrency.
func TestSequenceWithoutOpsUsesMix(t *testing.T) {
	var reads []uint64
	var sent [][]string // what the store was sent, sorted: the order varies with the workers
	for _, workers := range []int{1, 3} {
		cfg := traceConfig(t, "a\nb\nc\na\n", 2000)
		cfg.Mix, _ = workload.MixByName("A")
		cfg.Concurrency = workers
		f := newFake()
		r, err := RunOne(context.Background(), cfg, "fake", fakeOpener(f))
		if err != nil {
			t.Fatal(err)
		}
		if r.Workload != "A" || r.Reads+r.Updates != 2000 || r.Reads < 900 || r.Reads > 1100 {
			t.Errorf("workload %s: %d reads, %d updates", r.Workload, r.Reads, r.Updates)
		}
		reads = append(reads, r.Reads)
		sent = append(sent, slices.Sorted(slices.Values(f.log)))
	}
	if reads[0] != reads[1] {
		t.Errorf("reads %v: the operations depend on which worker takes which entry", reads)
	}
	if !slices.Equal(sent[0], sent[1]) {
		t.Error("the (operation, key) pairs depend on which worker takes which entry")
	}
}

// TestTemporalRunSameForEveryProtocol: each protocol of a run replays the
// temporal sequence from its start.
func TestTemporalRunSameForEveryProtocol(t *testing.T) {
	cfg := config(t, "C", "uniform", 300, 500)
	d, err := workload.New("temporal", 300, workload.Options{Seed: cfg.Seed, TraceLength: 550})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Keys, cfg.Concurrency, cfg.Warmup = d, 1, Warmup{Ops: 50}
	var logs [][]string
	open := func(context.Context, string) (Target, error) {
		f := newFake()
		logs = append(logs, nil)
		i := len(logs) - 1
		return &logTarget{fake: f, done: func() { logs[i] = f.log }}, nil
	}
	res, err := Run(context.Background(), cfg, []string{"one", "two"}, open)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Distribution != "temporal" || res[0].Reads != 500 {
		t.Fatalf("results %+v", res)
	}
	if len(logs[0]) != 550 || !slices.Equal(logs[0], logs[1]) {
		t.Errorf("the protocols saw different sequences (%d and %d gets)", len(logs[0]), len(logs[1]))
	}
	keys := workload.NewKeys(300)
	for i, e := range logs[0] {
		if rec, _, _ := d.(workload.Sequence).At(uint64(i)); e != "r "+keys.Key(rec) {
			t.Fatalf("get %d is %q, want record %d", i, e, rec)
		}
	}
}

// logTarget is a fake that hands its log over when closed.
type logTarget struct {
	*fake
	done func()
}

func (l *logTarget) Close(context.Context) error { l.done(); return nil }

func TestValidateTraceRecords(t *testing.T) {
	cfg := traceConfig(t, sampleTrace, 10)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Records = 5
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "4 records") {
		t.Errorf("records 5 for a 4-key trace: %v", err)
	}
}
