package backend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
)

func TestWithLatencyDelaysEveryCall(t *testing.T) {
	const d = 20 * time.Millisecond
	b := backend.WithLatency(mem.New(), d)
	ctx := context.Background()
	calls := map[string]func() error{
		"Read":   func() error { _, err := b.Read(ctx, []string{"k"}); return err },
		"Write":  func() error { return b.Write(ctx, []backend.Item{{Addr: "k", Value: []byte("v")}}) },
		"Delete": func() error { return b.Delete(ctx, []string{"k"}) },
		"WriteVersioned": func() error {
			_, err := b.WriteVersioned(ctx, []backend.VersionedItem{{Addr: "v", Version: 1}})
			return err
		},
	}
	for name, call := range calls {
		start := time.Now()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if took := time.Since(start); took < d {
			t.Errorf("%s took %v, want at least %v", name, took, d)
		}
	}
}

// TestWithLatencyOverlaps checks that concurrent calls wait concurrently,
// as on a network, instead of queueing behind each other: 10 calls of 50ms
// would take 500ms if serialised.
func TestWithLatencyOverlaps(t *testing.T) {
	const d, n = 50 * time.Millisecond, 10
	b := backend.WithLatency(mem.New(), d)
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := b.Read(context.Background(), []string{"k"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took < d || took > n*d/2 {
		t.Fatalf("%d concurrent calls with latency %v took %v, want between %v and %v", n, d, took, d, n*d/2)
	}
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
