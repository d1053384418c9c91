package waffle_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/waffle"
)

func TestMain(m *testing.M) { kvtest.Main(m) }

// Small parameters for capacity 64: C = B-f_D+R = 12, D = 32.
var small = waffle.Options{B: 10, R: 4, FD: 2, Timeout: 200 * time.Microsecond}

func TestContract(t *testing.T) {
	cfg := kvtest.Config{Protocol: "waffle", Integrity: true, Options: small}
	for _, st := range kvtest.Storages(t) {
		t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, cfg, st) })
	}
}

func TestLinearizable(t *testing.T) {
	cfg := kvtest.Config{Protocol: "waffle", Options: waffle.Options{B: 20, R: 8, FD: 4, Timeout: 100 * time.Microsecond}}
	s := kvtest.OpenStore(t, cfg, kvtest.Mem())
	kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
}

func open(t *testing.T, opts waffle.Options, log observe.Sink) (kv.Store, any) {
	t.Helper()
	b := mem.New()
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "waffle", Backend: b, Keys: kvtest.NewKeys(t),
		Capacity: 64, ValueSize: 32, Options: opts, TapLog: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, b
}

// TestBatchShape checks, from the backend log, that every batch is exactly
// one Read of B distinct addresses, then one Write of B new addresses, then
// one Delete of the B addresses read, that no address is ever read twice
// and that no address is written twice, whatever the mix of operations
// (inserts, overwrites, deletes, misses, cache hits, a full store).
func TestBatchShape(t *testing.T) {
	var log observe.MemoryLog
	s, _ := open(t, small, &log)
	log.Reset()
	ctx := t.Context()
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 60 {
				k := fmt.Sprintf("k%d", (g*7+i*3)%80) // more keys than capacity
				var err error
				switch i % 4 {
				case 0, 1:
					err = s.Put(ctx, k, []byte(k))
				case 2:
					_, _, err = s.Get(ctx, k)
				case 3:
					err = s.Delete(ctx, k)
				}
				if err != nil && !errors.Is(err, kv.ErrFull) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	recs := log.Records()
	if len(recs)%3 != 0 || len(recs) == 0 {
		t.Fatalf("%d backend calls; want a multiple of 3", len(recs))
	}
	B := small.B
	read, written := map[string]bool{}, map[string]bool{}
	for i := 0; i < len(recs); i += 3 {
		r, w, d := recs[i], recs[i+1], recs[i+2]
		if r.Op != observe.OpRead || w.Op != observe.OpWrite || d.Op != observe.OpDelete {
			t.Fatalf("batch %d: calls %v %v %v; want read, write, delete", i/3, r.Op, w.Op, d.Op)
		}
		if len(r.Addrs) != B || len(w.Addrs) != B || len(d.Addrs) != B {
			t.Fatalf("batch %d: read %d, wrote %d, deleted %d addresses; want %d each", i/3, len(r.Addrs), len(w.Addrs), len(d.Addrs), B)
		}
		for j, a := range r.Addrs {
			if read[a] {
				t.Fatalf("batch %d: address %s read twice", i/3, a)
			}
			read[a] = true
			if d.Addrs[j] != a {
				t.Fatalf("batch %d: deleted %s, read %s", i/3, d.Addrs[j], a)
			}
		}
		for _, a := range w.Addrs {
			if written[a] {
				t.Fatalf("batch %d: address %s written twice", i/3, a)
			}
			written[a] = true
		}
	}
	st := s.Stats()
	t.Logf("%d batches; stats %v", len(recs)/3, st.Extra)
}

// TestReadAfterWriteInBatch: a Get queued after a Put of the same (new)
// key in the same batch returns the Put's value.
func TestReadAfterWriteInBatch(t *testing.T) {
	opts := waffle.Options{B: 10, R: 2, FD: 2, Timeout: 2 * time.Second}
	s, _ := open(t, opts, nil)
	before := batches(s)
	ctx := t.Context()
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "k", []byte("v")) }()
	time.Sleep(50 * time.Millisecond) // the Put waits for a second request
	got, ok, err := s.Get(ctx, "k")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err != nil || !ok || string(got) != "v" {
		t.Fatalf("Get after Put in one batch = %q, %v, %v; want v", got, ok, err)
	}
	if n := batches(s) - before; n != 1 {
		t.Fatalf("%v batches ran; want the Put and the Get in one", n)
	}
}

func batches(s kv.Store) float64 {
	for _, x := range s.Stats().Extra {
		if x.Name == "batches" {
			return x.Value
		}
	}
	return -1
}

func TestCrashIsRefused(t *testing.T) {
	b := mem.New()
	keys := kvtest.NewKeys(t)
	cfg := kv.Config{Protocol: "waffle", Backend: b, Keys: keys, Capacity: 64, ValueSize: 32, Options: small}
	s, err := kv.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// A second open without Close: the state was never saved.
	b.Reopen()
	if _, err := kv.Open(t.Context(), cfg); err == nil {
		t.Fatal("open of a store that was not closed succeeded")
	}
	_ = s
}

func TestBadOptions(t *testing.T) {
	for _, o := range []waffle.Options{
		{B: 10, R: 4, FD: 6},       // f_R = 0
		{B: 10, R: 4, FD: 2, C: 5}, // C < B - f_D + R
		{B: 60, R: 4, FD: 2, D: 1}, // B > N + D - C
		{B: 10, R: 4, FD: 2, Timeout: -1},
	} {
		_, err := kv.Open(context.Background(), kv.Config{Protocol: "waffle", Backend: mem.New(), Keys: kvtest.NewKeys(t),
			Capacity: 64, ValueSize: 32, Options: o})
		if err == nil {
			t.Errorf("Options %+v accepted", o)
		}
	}
}

func TestTheory(t *testing.T) {
	// The paper's parameters at N = 1M: D = 500*(N-1)/1000.
	a, b := waffle.TheoreticalAlpha(waffle.Options{}, 1_000_000), waffle.TheoreticalBeta(waffle.Options{}, 1_000_000)
	if a != 1000 || b != 5 {
		t.Fatalf("alpha, beta at N=1M with defaults = %v, %v; want 1000, 5 (C=20000, B-f_D+R=3000)", a, b)
	}
}
