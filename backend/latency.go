package backend

import (
	"context"
	"time"
)

// WithLatency returns a Backend that waits d before every call to b, to
// emulate the wide-area round trip between a trusted proxy and cloud storage
// that every paper's evaluation assumes. Concurrent calls wait concurrently,
// as they would on a real network. Scan is not delayed: it runs only when a
// store is opened, never on the request path. d <= 0 returns b unchanged.
func WithLatency(b Backend, d time.Duration) Backend {
	if d <= 0 {
		return b
	}
	return &latency{Backend: b, d: d, sleep: sleep}
}

type latency struct {
	Backend
	d time.Duration
	// sleep waits: the package's sleep, or a test's fake clock.
	sleep func(ctx context.Context, d time.Duration) error
}

func (l *latency) wait(ctx context.Context) error { return l.sleep(ctx, l.d) }

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sync forwards to the wrapped backend, undelayed: it is not a round trip
// of the request path.
func (l *latency) Sync(ctx context.Context) error { return Sync(ctx, l.Backend) }

// DeferSync forwards to the wrapped backend.
func (l *latency) DeferSync() bool { return DeferSync(l.Backend) }

func (l *latency) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if err := l.wait(ctx); err != nil {
		return nil, err
	}
	return l.Backend.Read(ctx, addrs)
}

func (l *latency) Write(ctx context.Context, items []Item) error {
	if err := l.wait(ctx); err != nil {
		return err
	}
	return l.Backend.Write(ctx, items)
}

// Pipeline is one round trip: one delay.
func (l *latency) Pipeline(ctx context.Context, items []Item, reads [][]string) ([][][]byte, error) {
	if err := l.wait(ctx); err != nil {
		return nil, err
	}
	return Pipeline(ctx, l.Backend, items, reads)
}

func (l *latency) WriteFenced(ctx context.Context, f Fence, items []Item) error {
	if err := l.wait(ctx); err != nil {
		return err
	}
	return l.Backend.WriteFenced(ctx, f, items)
}

// PipelineFenced is one round trip: one delay.
func (l *latency) PipelineFenced(ctx context.Context, f Fence, items []Item, reads [][]string) ([][][]byte, error) {
	if err := l.wait(ctx); err != nil {
		return nil, err
	}
	return PipelineFenced(ctx, l.Backend, f, items, reads)
}

func (l *latency) WriteVersioned(ctx context.Context, items []VersionedItem) (int, error) {
	if err := l.wait(ctx); err != nil {
		return 0, err
	}
	return l.Backend.WriteVersioned(ctx, items)
}

func (l *latency) Delete(ctx context.Context, addrs []string) error {
	if err := l.wait(ctx); err != nil {
		return err
	}
	return l.Backend.Delete(ctx, addrs)
}
