package backend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/observe"
)

// fakeClock stands in for WithLatency's timer: a call that sleeps shows
// itself on asleep, and sleeps until the test wakes it.
type fakeClock struct{ asleep chan sleeper }

// sleeper is one call asleep on a fakeClock.
type sleeper struct {
	d    time.Duration
	wake chan struct{}
}

func newFakeClock() *fakeClock { return &fakeClock{asleep: make(chan sleeper)} }

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	s := sleeper{d: d, wake: make(chan struct{})}
	select {
	case c.asleep <- s:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the next call to fall asleep. It fails t when none does
// within a minute: only a call stuck behind another takes that long, never
// a slow machine.
func (c *fakeClock) next(t *testing.T) sleeper {
	t.Helper()
	select {
	case s := <-c.asleep:
		return s
	case <-time.After(time.Minute):
		t.Fatal("no call fell asleep within a minute")
		return sleeper{}
	}
}

// TestWithLatencyDelaysEveryCall: every call sleeps the latency before it
// reaches storage, and reaches it once woken.
func TestWithLatencyDelaysEveryCall(t *testing.T) {
	const d = 20 * time.Millisecond
	clock := newFakeClock()
	tap := observe.NewTap(mem.New(), nil)
	b := backend.WithLatencyClock(tap, d, clock.sleep)
	ctx := context.Background()
	calls := map[string]func() error{
		"Read":   func() error { _, err := b.Read(ctx, []string{"k"}); return err },
		"Write":  func() error { return b.Write(ctx, []backend.Item{{Addr: "k", Value: []byte("v")}}) },
		"Delete": func() error { return b.Delete(ctx, []string{"k"}) },
		"WriteVersioned": func() error {
			_, err := b.WriteVersioned(ctx, []backend.VersionedItem{{Addr: "v", Version: 1}})
			return err
		},
		"WriteFenced": func() error {
			return b.WriteFenced(ctx, backend.Fence{Key: "f", Token: 1}, []backend.Item{{Addr: "k", Value: []byte("v")}})
		},
		"PipelineFenced": func() error {
			_, err := backend.PipelineFenced(ctx, b, backend.Fence{Key: "f", Token: 1}, nil, nil)
			return err
		},
	}
	for name, call := range calls {
		before := tap.Counters().Calls
		done := make(chan error, 1)
		go func() { done <- call() }()
		s := clock.next(t)
		if s.d != d {
			t.Errorf("%s slept %v, want %v", name, s.d, d)
		}
		if got := tap.Counters().Calls; got != before {
			t.Errorf("%s reached storage before its delay", name)
		}
		close(s.wake)
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := tap.Counters().Calls; got != before+1 {
			t.Errorf("%s made %d storage calls once woken, want 1", name, got-before)
		}
	}
}

// TestWithLatencyWaitsOnTheTimer: without a fake clock a call takes at
// least the latency (a timer never fires early, so this holds on any
// machine).
func TestWithLatencyWaitsOnTheTimer(t *testing.T) {
	const d = 20 * time.Millisecond
	b := backend.WithLatency(mem.New(), d)
	start := time.Now()
	if _, err := b.Read(context.Background(), []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("Read took %v, want at least %v", took, d)
	}
}

// TestWithLatencyOverlaps: concurrent calls wait concurrently, as on a
// network, instead of queueing behind each other: all n fall asleep
// before the clock wakes any of them (a call queued behind another would
// never fall asleep).
func TestWithLatencyOverlaps(t *testing.T) {
	const d, n = 50 * time.Millisecond, 10
	clock := newFakeClock()
	b := backend.WithLatencyClock(mem.New(), d, clock.sleep)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := b.Read(context.Background(), []string{"k"}); err != nil {
				t.Error(err)
			}
		})
	}
	var asleep []sleeper
	for range n {
		asleep = append(asleep, clock.next(t))
	}
	for _, s := range asleep {
		close(s.wake)
	}
	wg.Wait()
}

func TestWithLatencyCanceled(t *testing.T) {
	inner := mem.New()
	b := backend.WithLatency(inner, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := b.Write(ctx, []backend.Item{{Addr: "k", Value: []byte("v")}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write with an expiring context = %v, want context.DeadlineExceeded", err)
	}
	if inner.Len() != 0 {
		t.Fatal("a canceled Write reached the backend")
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := b.Read(ctx, []string{"k"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read with a canceled context = %v, want context.Canceled", err)
	}
	if err := b.Delete(ctx, []string{"k"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Delete with a canceled context = %v, want context.Canceled", err)
	}
	if _, err := b.WriteVersioned(ctx, []backend.VersionedItem{{Addr: "k", Version: 1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteVersioned with a canceled context = %v, want context.Canceled", err)
	}
}

func TestWithLatencyZeroIsIdentity(t *testing.T) {
	inner := mem.New()
	if b := backend.WithLatency(inner, 0); b != backend.Backend(inner) {
		t.Fatalf("WithLatency(b, 0) = %T, want b itself", b)
	}
}
