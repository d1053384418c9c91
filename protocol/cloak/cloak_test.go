package cloak_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/cloak"
)

func TestMain(m *testing.M) { kvtest.Main(m) }

// fast batches every 500us, so tests need not wait 20 ms per batch.
var fast = cloak.Options{Delta: 500 * time.Microsecond}

// contractConfig is the contract suite's configuration of stores of o.
func contractConfig(o cloak.Options) kvtest.Config {
	return kvtest.Config{Protocol: "cloak", Integrity: true, Durable: true, NamesKeys: true, Options: o}
}

func TestContract(t *testing.T) {
	cfg := contractConfig(fast)
	for _, st := range kvtest.Storages(t) {
		t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, cfg, st) })
	}
}

// TestLinearizable: clients with a hot key, so reads race writes to the
// same key; writes are acknowledged before any batch takes them. On
// jittered storage batches take longer than Delta and requests pile up.
// The second setting keeps almost nothing in the cache and bounds the
// pending keys at 4, so most reads wait for a batch and requests wait for
// room: reads then span many acknowledged writes, and porcupine's search
// over 16 clients times out (inconclusive, not a violation), so it runs 8.
func TestLinearizable(t *testing.T) {
	for _, c := range []struct {
		opts    cloak.Options
		clients int
	}{
		{fast, 16},
		{cloak.Options{Delta: 300 * time.Microsecond, Cache: 1, Pending: 4}, 8},
	} {
		cfg := kvtest.Config{Protocol: "cloak", Options: c.opts}
		for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Jittered(kvtest.Mem(), time.Millisecond)} {
			t.Run(st.Name, func(t *testing.T) {
				s := kvtest.OpenStore(t, cfg, st)
				kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: c.clients, OpsPerClient: 150, DeleteFraction: 0.15})
			})
		}
	}
}

// TestBudgetsMatchPaper: Algorithm 3 with b_1 = 433 and s = 1 gives the
// batch sizes of the paper's artifact (3999 at N = 1M, 3744 for the
// Ethereum trace's 701,317 elements), every budget at least 1, and sets
// that hold at least N addresses.
func TestBudgetsMatchPaper(t *testing.T) {
	for _, c := range []struct{ n, beta int }{{1_000_000, 3999}, {701_317, 3744}} {
		b := cloak.Budgets(c.n, 433, 1)
		total, covered := 0, 0
		for d, bd := range b {
			if bd < 1 {
				t.Fatalf("N=%d: b_%d = %d", c.n, d+1, bd)
			}
			if d > 0 && bd > b[d-1] {
				t.Fatalf("N=%d: budgets rise at d=%d", c.n, d+1)
			}
			total += bd
			covered += (d + 1) * bd
		}
		if total != c.beta || covered < c.n || covered-(len(b))*b[len(b)-1] >= c.n {
			t.Errorf("N=%d: beta %d over %d sets covering %d; want beta %d, covering N with the last set needed", c.n, total, len(b), covered, c.beta)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []cloak.Options{
		{S: -1}, {B1: 10, Beta: 100}, {Beta: 3}, {B1: -1}, {Delta: -time.Millisecond}, {B1: 1000},
	} {
		_, err := kv.Open(t.Context(), kv.Config{Protocol: "cloak", Backend: mem.New(), Keys: kvtest.NewKeys(t), Capacity: 100, ValueSize: 8, Options: o})
		if err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

// TestRestart: a clean restart keeps the data, including writes
// acknowledged but not yet written by a batch; other budgets are refused
// and the refusal keeps the store, and so is an open without the journal.
func TestRestart(t *testing.T) {
	ctx := t.Context()
	b, keys := mem.New(), kvtest.NewKeys(t)
	cfg := kv.Config{Protocol: "cloak", Backend: b, Keys: keys, Capacity: 100, ValueSize: 8, OpenJournal: kvtest.Journal(t.TempDir()),
		Options: cloak.Options{Delta: time.Hour}}
	s, err := kv.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a", []byte("1")); err != nil { // no batch runs in an hour
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b.Reopen()
	cfg.Options = cloak.Options{Delta: time.Millisecond}
	if s, err = kv.Open(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitBatches(t, s, 3)
	if v, ok, err := s.Get(ctx, "a"); err != nil || !ok || string(v) != "1" {
		t.Fatalf("after a restart Get(a) = %q, %v, %v", v, ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b.Reopen()
	cfg.Options = cloak.Options{B1: 3}
	if _, err := kv.Open(ctx, cfg); !errors.Is(err, kv.ErrMismatch) {
		t.Fatalf("open with other budgets: %v; want kv.ErrMismatch", err)
	}
	noJournal := cfg
	noJournal.Options, noJournal.OpenJournal = nil, nil
	if _, err := kv.Open(ctx, noJournal); !errors.Is(err, durable.ErrNoJournal) {
		t.Fatalf("open without the journal: %v; want durable.ErrNoJournal", err)
	}
	cfg.Options = nil
	if s, err = kv.Open(ctx, cfg); err != nil { // the refused opens kept the store
		t.Fatal(err)
	}
	defer s.Close()
	if v, ok, err := s.Get(ctx, "a"); err != nil || !ok || string(v) != "1" {
		t.Fatalf("after refused opens Get(a) = %q, %v, %v", v, ok, err)
	}
}

func waitBatches(t *testing.T, s kv.Store, n float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := kvtest.Stat(t, s.Stats(), "batches")
	for kvtest.Stat(t, s.Stats(), "batches") < start+n {
		select {
		case <-ctx.Done():
			t.Fatal("no batches ran")
		case <-time.After(time.Millisecond):
		}
	}
}
