package kvtest

import (
	"context"
	"sync"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
)

// live is the storage of a running store that a test edits behind the
// store's back. Each call of the store holds a shared lock for its whole
// duration and an edit holds it exclusively, so every call runs wholly
// before or wholly after an edit, whatever the store's goroutines do
// meanwhile. Beneath the lock a Tap logs the store's calls: a call is in
// the log by the time it releases the lock, so the log at an edit holds
// exactly the calls that ran before it. (The Tap kv.Open puts above the
// backend records a call only once it returned, after the lock, so its
// log cannot tell which side of an edit a call ran on.)
type live struct {
	mu  sync.RWMutex
	raw backend.Backend // the storage handle: edits use it directly, unlogged
	tap *observe.Tap    // raw, logging the store's calls into log
	log *observe.MemoryLog
}

func newLive(raw backend.Backend) *live {
	l := &live{raw: raw, log: &observe.MemoryLog{}}
	l.tap = observe.NewTap(raw, l.log)
	return l
}

// edit runs fn on the storage while no call of the store runs, and returns
// the log's last sequence number then: every record after it is a call
// that ran after the edit.
func (l *live) edit(fn func(b backend.Backend)) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	mark := l.log.LastSeq()
	fn(l.raw)
	return mark
}

// Read implements backend.Backend.
func (l *live) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tap.Read(ctx, addrs)
}

// Write implements backend.Backend.
func (l *live) Write(ctx context.Context, items []backend.Item) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tap.Write(ctx, items)
}

// WriteVersioned implements backend.Backend.
func (l *live) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tap.WriteVersioned(ctx, items)
}

// Pipeline implements backend.Pipeliner: one call, wholly on one side of
// an edit, as the storage handle runs it.
func (l *live) Pipeline(ctx context.Context, items []backend.Item, reads [][]string) ([][][]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tap.Pipeline(ctx, items, reads)
}

// WriteFenced implements backend.Backend.
func (l *live) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tap.WriteFenced(ctx, f, items)
}

// PipelineFenced implements backend.Pipeliner, as Pipeline does.
func (l *live) PipelineFenced(ctx context.Context, f backend.Fence, items []backend.Item, reads [][]string) ([][][]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tap.PipelineFenced(ctx, f, items, reads)
}

// Delete implements backend.Backend.
func (l *live) Delete(ctx context.Context, addrs []string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tap.Delete(ctx, addrs)
}

// Scan implements backend.Backend.
func (l *live) Scan(ctx context.Context, prefix string, fn func(addr string) error) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tap.Scan(ctx, prefix, fn)
}

// Sync implements backend.Syncer.
func (l *live) Sync(ctx context.Context) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return backend.Sync(ctx, l.raw)
}

// DeferSync implements backend.SyncDeferrer.
func (l *live) DeferSync() bool { return backend.DeferSync(l.raw) }

// Close implements backend.Backend.
func (l *live) Close() error { return l.raw.Close() }

// openLive opens a store on a new storage handle that edit can change
// while the store runs.
func (h *harness) openLive() (kv.Store, *live) {
	h.t.Helper()
	var l *live
	s := h.mustOpen(func(c *kv.Config) {
		l = newLive(c.Backend)
		c.Backend = l
	})
	return s, l
}
