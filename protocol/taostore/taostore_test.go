package taostore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/taostore"
	"github.com/oblivkv/oblivkv/seal"
)

var cfg = kvtest.Config{Protocol: "taostore", Integrity: true, Durable: true, NamesKeys: true}

func TestMain(m *testing.M) { kvtest.Main(m) }

func TestContract(t *testing.T) {
	for _, c := range []kvtest.Config{cfg, {Protocol: "taostore", Integrity: true, Durable: true, NamesKeys: true, Options: taostore.Options{K: 3, CachedLevels: 2}}} {
		for _, st := range kvtest.Storages(t) {
			t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, c, st) })
		}
	}
}

// TestLinearizable: 16 clients mixing GET/SET/DEL, half of them on one
// key, with a small write-back threshold so write-backs overlap reads.
func TestLinearizable(t *testing.T) {
	lin := kvtest.Config{Protocol: "taostore", Options: taostore.Options{K: 4}}
	for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Redis(), kvtest.Jittered(kvtest.Mem(), 3*time.Millisecond)} {
		t.Run(st.Name, func(t *testing.T) {
			s := kvtest.OpenStore(t, lin, st)
			kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
		})
	}
	// INCR, APPEND and SETNX among GET, SET and DEL.
	t.Run("mutations", func(t *testing.T) {
		s := kvtest.OpenStore(t, lin, kvtest.Jittered(kvtest.Mem(), 3*time.Millisecond))
		kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.1, MutationFraction: 0.6})
	})
}

// TestStaleWriteBackLoses: with write-backs delayed at random, some arrive
// after newer ones; the storage refuses them (stale_buckets > 0) and no
// data is lost across a restart.
func TestStaleWriteBackLoses(t *testing.T) {
	open := kvtest.Jittered(kvtest.Mem(), 3*time.Millisecond).New(t)
	keys, journal := kvtest.NewKeys(t), t.TempDir()
	reopen := func() kv.Store {
		b, err := open()
		if err != nil {
			t.Fatal(err)
		}
		s, err := kv.Open(t.Context(), kv.Config{Protocol: "taostore", Backend: b, Keys: keys,
			Capacity: 64, ValueSize: 16, Options: taostore.Options{K: 1}, OpenJournal: kvtest.Journal(journal)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := reopen()
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 20 {
				key := string(rune('a' + (w+i)%26))
				if err := s.Put(ctx, key, []byte{byte(w), byte(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	stale := kvtest.Stat(t, s.Stats(), "stale_buckets")
	t.Logf("stale buckets refused by storage: %v of %v write-backs", stale, kvtest.Stat(t, s.Stats(), "write_backs"))
	if stale == 0 {
		t.Fatal("no write-back arrived late; the test did not exercise versioning")
	}
	if got := s.Stats().Keys; got != 26 {
		t.Fatalf("%d keys, want 26", got)
	}
	before := map[string][]byte{}
	for k := 'a'; k <= 'z'; k++ {
		v, ok, err := s.Get(ctx, string(k))
		if err != nil || !ok {
			t.Fatalf("Get(%c) = %v, %v; want a value", k, ok, err)
		}
		before[string(k)] = v
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen()
	defer s.Close()
	for k, want := range before {
		if got, ok, err := s.Get(ctx, k); err != nil || !ok || !bytes.Equal(got, want) {
			t.Fatalf("after a restart Get(%s) = %v, %v, %v; want %v", k, got, ok, err, want)
		}
	}
}

// extra returns the value of a protocol statistic, failing the test when
// the store does not report it.
// TestReplayedBucketsDetected: storage that serves authentic but old
// bucket versions (a snapshot taken earlier) is caught: reads return the
// latest value or kv.ErrTampered, never an old value.
func TestReplayedBucketsDetected(t *testing.T) {
	raw := mem.New()
	cfg := kv.Config{Protocol: "taostore", Backend: raw, Keys: kvtest.NewKeys(t),
		Capacity: 64, ValueSize: 16, Options: taostore.Options{K: 1}, OpenJournal: kvtest.Journal(t.TempDir())}
	s, err := kv.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		if err := s.Put(ctx, k, []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := dump(t, raw)
	for round := range 20 { // move every block and age every bucket version
		for _, k := range keys {
			if err := s.Put(ctx, k, []byte(fmt.Sprint("new", round))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A clean restart empties the subtree, so every read uses storage.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw.Reopen()
	restore(t, raw, snapshot)
	if s, err = kv.Open(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tampered := 0
	for _, k := range keys {
		got, _, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, kv.ErrTampered):
			tampered++
		case err != nil:
			t.Fatalf("Get %s: %v", k, err)
		case string(got) != "new19":
			t.Fatalf("Get %s = %q after a replay; want the latest value or ErrTampered", k, got)
		}
	}
	if tampered == 0 {
		t.Fatal("no read detected the replayed buckets")
	}
}

func dump(t *testing.T, b *mem.Backend) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := b.Scan(context.Background(), taostore.BucketPrefix, func(a string) error {
		v, err := b.Read(context.Background(), []string{a})
		out[a] = v[0]
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func restore(t *testing.T, b *mem.Backend, snap map[string][]byte) {
	t.Helper()
	var items []backend.Item
	for a, v := range snap {
		items = append(items, backend.Item{Addr: a, Value: v})
	}
	if err := b.Write(context.Background(), items); err != nil {
		t.Fatal(err)
	}
}

// TestReopenWithOtherLayout: Z and CachedLevels are the tree's layout;
// reopening with others is ErrMismatch and changes nothing, so reopening
// with the right options still serves the data.
func TestReopenWithOtherLayout(t *testing.T) {
	b, keys, journal := mem.New(), kvtest.NewKeys(t), t.TempDir()
	open := func(o taostore.Options) (kv.Store, error) {
		b.Reopen()
		return kv.Open(t.Context(), kv.Config{Protocol: "taostore", Backend: b, Keys: keys, Capacity: 64, ValueSize: 16,
			Options: o, OpenJournal: kvtest.Journal(journal)})
	}
	s, err := open(taostore.Options{CachedLevels: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []taostore.Options{{}, {Z: 3, CachedLevels: 2}} {
		if s, err := open(o); !errors.Is(err, kv.ErrMismatch) {
			if err == nil {
				s.Close()
			}
			t.Fatalf("reopening with %+v: %v; want kv.ErrMismatch", o, err)
		}
	}
	s, err = open(taostore.Options{CachedLevels: 2, K: 7}) // K may change
	if err != nil {
		t.Fatalf("reopening with the right layout after refused opens: %v", err)
	}
	defer s.Close()
	if got, ok, err := s.Get(t.Context(), "k"); err != nil || !ok || string(got) != "v" {
		t.Fatalf("Get after reopening = %q, %v, %v; want v", got, ok, err)
	}
}

// failing is a backend whose Writes fail while fail is set.
type failing struct {
	backend.Backend
	fail atomic.Bool
}

func (f *failing) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	if f.fail.Load() {
		return 0, errors.New("injected write failure")
	}
	return f.Backend.WriteVersioned(ctx, items)
}

// crashable opens a taostore on b with its own journal in dir, so the test
// can crash it: the journal dies as with the process, storage keeps what
// it received.
func crashable(t *testing.T, b backend.Backend, keys *seal.Keys, dir string, fresh bool, o taostore.Options) (kv.Store, *journal.Journal) {
	t.Helper()
	j, err := journal.Open(dir, keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := taostore.OpenRaw(t.Context(), kv.Env{Backend: b, Keys: keys, Capacity: 64, ValueSize: 16, Fresh: fresh, Journal: j, Options: o})
	if err != nil {
		j.Crash()
		t.Fatal(err)
	}
	return s, j
}

// TestCrashRecovers: acknowledged writes survive a crash, whether their
// paths were written back (K=3: write-backs every 3 paths), still only in
// the subtree, or journaled in a write-back that failed before the crash;
// across several crashes and the checkpoints between them.
func TestCrashRecovers(t *testing.T) {
	fb, keys, dir := &failing{Backend: mem.New()}, kvtest.NewKeys(t), t.TempDir()
	o := taostore.Options{K: 3}
	s, j := crashable(t, fb, keys, dir, true, o)
	want := kvtest.Model{}
	for round := range 3 {
		for i := range 20 {
			want.Put(t, s, fmt.Sprint("k", i), fmt.Sprint("v", round, i))
		}
		if round == 2 {
			fb.fail.Store(true) // the next write-backs fail after their records
			want.Put(t, s, "k0", "last")
			want.Put(t, s, "k1", "last")
			want.Put(t, s, "k2", "last")
		}
		j.Crash()
		fb.fail.Store(false)
		s, j = crashable(t, fb, keys, dir, false, o)
		want.Check(t, s, fmt.Sprint("after crash ", round+1))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	j.Close()
}

// TestCrashDuringLoad: a bulk load cut short by a crash leaves an empty
// store that works.
func TestCrashDuringLoad(t *testing.T) {
	fb, keys, dir := &failing{Backend: mem.New()}, kvtest.NewKeys(t), t.TempDir()
	s, j := crashable(t, fb, keys, dir, true, taostore.Options{})
	fb.fail.Store(true)
	l := s.(kv.Loader)
	if _, err := l.Load(t.Context(), func(yield func(string, []byte) bool) { yield("a", []byte("1")) }); err == nil {
		t.Fatal("a Load whose writes failed succeeded")
	}
	j.Crash()
	fb.fail.Store(false)
	s, j = crashable(t, fb, keys, dir, false, taostore.Options{})
	defer j.Close()
	if _, ok, err := s.Get(t.Context(), "a"); err != nil || ok {
		t.Fatalf("Get after an interrupted load: %v, %v; want an empty store", ok, err)
	}
	if err := s.Put(t.Context(), "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// holding is a backend whose versioned writes (the write-backs) wait
// while it holds them.
type holding struct {
	backend.Backend
	mu      sync.RWMutex // write-locked while holding
	waiting atomic.Int64
}

func (h *holding) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	h.waiting.Add(1)
	h.mu.RLock()
	defer h.mu.RUnlock()
	h.waiting.Add(-1)
	return h.Backend.WriteVersioned(ctx, items)
}

// A checkpoint waits for the write-backs in flight, which under load
// take seconds; no request waits for it. With every write-back held and
// a checkpoint due after every record, requests are still answered: Puts
// go on until a write-back is held (write-backs start in the background,
// so on a loaded machine the first Puts may all finish before one does),
// then five more must finish while it is.
func TestRequestsDoNotWaitForCheckpoints(t *testing.T) {
	h, keys, dir := &holding{Backend: mem.New()}, kvtest.NewKeys(t), t.TempDir()
	s, j := crashable(t, h, keys, dir, true, taostore.Options{K: 1})
	taostore.CheckpointEvery(s, 1)
	h.mu.Lock()
	done := make(chan error, 1)
	go func() {
		after := -1 // Puts finished since a write-back was seen held
		for i := 0; after < 5; i++ {
			if i == 10000 {
				done <- errors.New("no write-back was held after 10000 Puts: the test exercised nothing")
				return
			}
			if err := s.Put(t.Context(), fmt.Sprint("k", i%50), []byte("v")); err != nil {
				done <- err
				return
			}
			if after >= 0 || h.waiting.Load() > 0 {
				after++
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			h.mu.Unlock()
			t.Fatalf("Puts with the write-backs held and a checkpoint due: %v", err)
		}
	case <-time.After(time.Minute): // a deadlock, not a slow machine
		h.mu.Unlock()
		t.Fatal("the Puts wait for a checkpoint, which waits for the held write-backs")
	}
	if h.waiting.Load() == 0 {
		t.Error("no write-back was held at the end: the test exercised nothing")
	}
	h.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	j.Close()
}

// TestPowerLoss: with storage syncing only at checkpoints, a power cut
// loses nothing acknowledged (the journal redoes what storage lost).
func TestPowerLoss(t *testing.T) {
	kvtest.CheckPowerLoss(t, taostore.OpenRaw, kv.Env{Capacity: 64, ValueSize: 16, Options: taostore.Options{K: 3}})
}

// TestEarlierCheckpointNamesNoKeys: a store whose checkpoint holds no
// names (an earlier build's) opens and serves, and names its keys only
// once each is written again.
func TestEarlierCheckpointNamesNoKeys(t *testing.T) {
	kvtest.CheckEarlierUnnamed(t, taostore.OpenRaw, kv.Env{Capacity: 64, ValueSize: 16, Options: taostore.Options{K: 3}},
		func(s kv.Store) {
			if err := taostore.CheckpointUnnamed(t.Context(), s); err != nil {
				t.Fatal(err)
			}
		})
}
