package kvtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
)

// CheckDeposed is the fencing case of a protocol whose storage writes are
// fenced (backend.Fence), on one storage: two drivers of one store, the
// older one's write landing after the newer one has taken over.
//
// Driver A runs the store and has a write held in flight (its storage
// handle holds every fenced write once armed). Driver B then opens the
// same store from a copy of A's journal taken at that moment, as a new
// leader takes over from the log: its incarnation is one more than A's.
// B must serve every write A acknowledged before the copy. A's held write
// is then let go: storage must refuse it, A must fail with kv.ErrFenced
// (never kv.ErrTampered), and B must go on serving, its data untouched by
// A's write.
//
// Both drivers share the storage through separate handles, so it runs on
// storage that a second handle may open while the first is open (mem and
// redis; the disk store is locked to one process, and its fencing is the
// backend contract's).
func CheckDeposed(t *testing.T, cfg Config, st Storage) {
	cfg = cfg.withDefaults()
	cfg.validate(t)
	ctx := t.Context()
	open, keys := st.New(t), NewKeys(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	handleA, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { handleA.Close() })
	held := &holdingWrites{Backend: handleA, release: make(chan struct{})}
	a, err := cfg.Open(ctx, cfg.kvConfig(held, keys, dirA))
	if err != nil {
		t.Fatalf("opening driver A: %v", err)
	}
	n := cfg.Capacity / 2
	acked := make([]string, n)
	for i := range n {
		acked[i] = fmt.Sprintf("a0-%d", i)
		if err := a.Put(ctx, depKey(i), []byte(acked[i])); err != nil {
			t.Fatalf("driver A: Put: %v", err)
		}
	}
	acked, inFlight := putUntilHeld(t, a, held, acked)
	if err := os.CopyFS(dirB, os.DirFS(dirA)); err != nil {
		t.Fatalf("copying A's journal: %v", err)
	}
	handleB, err := open()
	if err != nil {
		t.Fatal(err)
	}
	b, err := cfg.Open(ctx, cfg.kvConfig(handleB, keys, dirB))
	if err != nil {
		t.Fatalf("opening driver B from a copy of A's journal: %v", err)
	}
	defer b.Close()
	checkTakenOver(t, b, acked, inFlight)
	close(held.release)
	checkDeposed(t, a)
	for i := range n {
		v := fmt.Sprintf("b-%d", i)
		if err := b.Put(ctx, depKey(i), []byte(v)); err != nil {
			t.Fatalf("driver B after A's refused write: Put: %v", err)
		}
		acked[i] = v
	}
	checkTakenOver(t, b, acked, nil)
	if got := held.refused.Load(); got == 0 {
		t.Fatalf("storage refused none of A's writes after B took over")
	}
}

func depKey(i int) string { return fmt.Sprintf("key-%d", i) }

// putUntilHeld overwrites the keys on a, one Put at a time, until a
// storage write of a is held. It returns the values acknowledged by then
// (acked, updated on a copy: the Put in flight may still end later) and
// the Put in flight, by its key's index (none, or one): it may or may not
// take effect.
func putUntilHeld(t *testing.T, a kv.Store, held *holdingWrites, acked []string) (now []string, inFlight map[int]string) {
	acked = slices.Clone(acked)
	held.armed.Store(true)
	done := make(chan struct{})
	var mu sync.Mutex
	inFlight = map[int]string{}
	go func() {
		defer close(done)
		for i := 0; !held.holding.Load(); i++ {
			k, v := i%len(acked), fmt.Sprintf("a1-%d", i)
			mu.Lock()
			inFlight[k] = v
			mu.Unlock()
			if err := a.Put(context.Background(), depKey(k), []byte(v)); err != nil {
				return
			}
			mu.Lock()
			acked[k] = v
			delete(inFlight, k)
			mu.Unlock()
		}
	}()
	WaitFor(t, "a write of driver A held in flight", held.holding.Load)
	select { // the Put in flight, if any, is blocked behind the held write
	case <-done:
	case <-time.After(100 * time.Millisecond):
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(acked), maps.Clone(inFlight)
}

// checkTakenOver requires b to serve every value of acked, or the value of
// a Put that was in flight.
func checkTakenOver(t *testing.T, b kv.Store, acked []string, inFlight map[int]string) {
	t.Helper()
	for i, want := range acked {
		got, ok, err := b.Get(t.Context(), depKey(i))
		if err != nil || !ok || (string(got) != want && string(got) != inFlight[i]) {
			t.Fatalf("driver B: Get(%q) = %q, %v, %v; want %q (or %q, in flight)", depKey(i), got, ok, err, want, inFlight[i])
		}
	}
}

// checkDeposed requires a, whose held write storage refuses, to fail with
// kv.ErrFenced and never with kv.ErrTampered.
func checkDeposed(t *testing.T, a kv.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var err error
	for i := 0; err == nil && ctx.Err() == nil; i++ {
		err = a.Put(ctx, depKey(i%4), []byte("late"))
	}
	if !errors.Is(err, kv.ErrFenced) || errors.Is(err, kv.ErrTampered) {
		t.Fatalf("driver A after B took over: %v; want kv.ErrFenced, not kv.ErrTampered", err)
	}
	a.Close()
}

// holdingWrites is a storage handle that, once armed, holds every fenced
// write with items until release is closed, and counts those storage
// refuses. It is no Pipeliner, so a fenced pipeline is a WriteFenced and
// its Reads. Close leaves the handle open: its owner closes it.
type holdingWrites struct {
	backend.Backend
	armed, holding atomic.Bool
	release        chan struct{}
	refused        atomic.Int64
}

func (h *holdingWrites) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if len(items) > 0 && h.armed.Load() {
		h.holding.Store(true)
		<-h.release
	}
	err := h.Backend.WriteFenced(ctx, f, items)
	if errors.Is(err, backend.ErrFenced) {
		h.refused.Add(1)
	}
	return err
}

func (h *holdingWrites) Close() error { return nil }
