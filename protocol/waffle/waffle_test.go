package waffle_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/waffle"
)

func TestMain(m *testing.M) { kvtest.Main(m) }

// Small parameters for capacity 64: C = B-f_D+R = 12, D = 32.
var small = waffle.Options{B: 10, R: 4, FD: 2, Timeout: 200 * time.Microsecond}

func TestContract(t *testing.T) {
	// An object's id is prf(key, timestamp), fresh at every write, and
	// every object read is deleted (Waffle Sec. 4, Challenge 4, and Sec. 6.2): an older object put
	// back at its own id is never read again, by construction, so the
	// TamperReplay case puts older objects over the ids written since.
	cfg := kvtest.Config{Protocol: "waffle", Integrity: true, Durable: true, NamesKeys: true, Options: small, FreshAddresses: true}
	for _, st := range kvtest.Storages(t) {
		t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, cfg, st) })
	}
}

// TestLinearizable runs on fast storage and on storage slow enough that
// requests pile up while a batch runs, filling batches with duplicate keys.
func TestLinearizable(t *testing.T) {
	cfg := kvtest.Config{Protocol: "waffle", Options: waffle.Options{B: 20, R: 8, FD: 4, Timeout: 100 * time.Microsecond}}
	for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Jittered(kvtest.Mem(), time.Millisecond)} {
		t.Run(st.Name, func(t *testing.T) {
			s := kvtest.OpenStore(t, cfg, st)
			kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
		})
	}
	// INCR, APPEND and SETNX among GET, SET and DEL, several on one key in
	// a batch.
	t.Run("mutations", func(t *testing.T) {
		s := kvtest.OpenStore(t, cfg, kvtest.Jittered(kvtest.Mem(), time.Millisecond))
		kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.1, MutationFraction: 0.6})
	})
}

// open opens a fresh store of capacity 64 with values of 32 bytes,
// recording its backend calls to log.
func open(t *testing.T, opts waffle.Options, log observe.Sink) kv.Store {
	t.Helper()
	cfg := kvtest.Config{Protocol: "waffle", Options: opts, ValueSize: 32,
		Open: func(ctx context.Context, c kv.Config) (kv.Store, error) {
			c.TapLog = log
			return kv.Open(ctx, c)
		}}
	return kvtest.OpenStore(t, cfg, kvtest.Mem())
}

// TestBatchShape checks, from the backend log, that every batch is exactly
// one Read of B distinct addresses, then one Write of B new addresses, then
// one Delete of the B addresses read, that no address is ever read twice
// and that no address is written twice or after it was read, whatever the
// mix of operations (inserts, overwrites, deletes, misses, cache hits, a
// full store). The store is journaled, so checkpoints write the anchor
// between batches, every durable.DefaultEvery journal records.
func TestBatchShape(t *testing.T) {
	var log observe.MemoryLog
	s := open(t, small, &log)
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
	var recs []observe.Record
	for _, r := range log.Records() {
		if !durable.IsAnchorWrite(r) {
			recs = append(recs, r)
		}
	}
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
				t.Fatalf("batch %d: address %q read twice", i/3, a)
			}
			read[a] = true
			if d.Addrs[j] != a {
				t.Fatalf("batch %d: deleted %q, read %q", i/3, d.Addrs[j], a)
			}
		}
		for _, a := range w.Addrs {
			if written[a] || read[a] {
				t.Fatalf("batch %d: address %q written again (before: written %v, read %v)", i/3, a, written[a], read[a])
			}
			written[a] = true
		}
	}
	st := s.Stats()
	t.Logf("%d batches; stats %v", len(recs)/3, st.Extra)
}

// TestReadAfterWriteInBatch: a Get queued after a Put of the same (new)
// key in the same batch returns the Put's value. The batch's Timeout runs
// on a fake clock no one advances, so the batch closes with its R = 2
// requests.
func TestReadAfterWriteInBatch(t *testing.T) {
	clock := clockwork.NewFakeClock()
	opts := waffle.Options{B: 10, R: 2, FD: 2, TestingKnobs: waffle.TestingKnobs{Clock: clock}}
	s := open(t, opts, nil)
	before := batches(s)
	ctx := t.Context()
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "k", []byte("v")) }()
	// The Put waits for a second request once its batch's timer is set.
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
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

// A store opened without a journal keeps its state in memory only: it
// cannot be reopened, closed cleanly or not.
func TestReopenNeedsJournal(t *testing.T) {
	b := mem.New()
	cfg := kv.Config{Protocol: "waffle", Backend: b, Keys: kvtest.NewKeys(t), Capacity: 64, ValueSize: 32, Options: small}
	s, err := kv.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b.Reopen()
	if _, err := kv.Open(t.Context(), cfg); !errors.Is(err, durable.ErrNoJournal) {
		t.Fatalf("reopening a store created without a journal: %v; want durable.ErrNoJournal", err)
	}
}

func TestBadOptions(t *testing.T) {
	openWith := func(o waffle.Options) (kv.Store, error) {
		return kv.Open(t.Context(), kv.Config{Protocol: "waffle", Backend: mem.New(), Keys: kvtest.NewKeys(t),
			Capacity: 64, ValueSize: 32, Options: o})
	}
	s, err := openWith(small) // the same configuration with good options
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, o := range []waffle.Options{
		{B: 10, R: 4, FD: 6},       // f_R = 0
		{B: 10, R: 4, FD: 2, C: 5}, // C < B - f_D + R
		{B: 60, R: 4, FD: 2, D: 1}, // B > N + D - C
		{B: 10, R: 4, FD: 2, Timeout: -1},
		{B: 10, R: 4, FD: 2, D: 3}, // D < R: four inserts, three dummies
	} {
		if _, err := openWith(o); err == nil {
			t.Errorf("Options %+v accepted", o)
		}
	}
}

// TestTheory checks Theorems 7.1 and 7.2 against values worked out by hand.
func TestTheory(t *testing.T) {
	for _, c := range []struct {
		name        string
		opts        waffle.Options
		n           int
		alpha, beta float64
	}{
		// The paper's parameters (Table 2, medium security): D =
		// ceil(500*(N-1)/1000), C = 20000, B-f_D+R = 3000.
		{"paper", waffle.Options{}, 1_000_000, 1000, 5},
		// C = B-f_D+R = 12, D = ceil(2*63/4) = 32: max(63/4, 32/2) = 16.
		{"small", small, 64, 16, 0},
		// max(2047/24, 300/8) = 85.3; C/(B-f_D+R) = 200/40 = 5.
		{"audit", auditOpts, auditN, 86, 4},
	} {
		a, b := waffle.TheoreticalAlpha(c.opts, c.n), waffle.TheoreticalBeta(c.opts, c.n)
		if a != c.alpha || b != c.beta {
			t.Errorf("%s: alpha, beta = %v, %v; want %v, %v", c.name, a, b, c.alpha, c.beta)
		}
	}
}
