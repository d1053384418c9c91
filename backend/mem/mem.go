// Package mem is an in-memory backend.Backend, for tests and for
// benchmarks that should measure protocol cost without storage cost.
//
// It owns a map guarded by one lock, which makes every call atomic. It must
// never share the slices it stores with callers.
package mem

import (
	"context"
	"strings"
	"sync"

	"github.com/oblivkv/oblivkv/backend"
)

// Backend is an in-memory backend.Backend.
type Backend struct {
	mu     sync.RWMutex
	data   map[string][]byte
	closed bool
}

// New returns an empty in-memory backend.
func New() *Backend { return &Backend{data: map[string][]byte{}} }

// Read implements backend.Backend.
func (b *Backend) Read(_ context.Context, addrs []string) ([][]byte, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return nil, backend.ErrClosed
	}
	out := make([][]byte, len(addrs))
	for i, a := range addrs {
		if v, ok := b.data[a]; ok {
			out[i] = append(make([]byte, 0, len(v)), v...)
		}
	}
	return out, nil
}

// Write implements backend.Backend.
func (b *Backend) Write(_ context.Context, items []backend.Item) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	for _, it := range items {
		b.data[it.Addr] = append(make([]byte, 0, len(it.Value)), it.Value...)
	}
	return nil
}

// WriteFenced implements backend.Backend: the lock makes the token's
// check and the batch's store one step.
func (b *Backend) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if f.Unfenced() {
		return b.Write(ctx, items)
	}
	if err := backend.CheckFence(f, items); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	if err := backend.Admit(f, b.data[f.Key]); err != nil {
		return err
	}
	for _, it := range backend.FencedItems(f, items) {
		b.data[it.Addr] = append(make([]byte, 0, len(it.Value)), it.Value...)
	}
	return nil
}

// WriteVersioned implements backend.Backend.
func (b *Backend) WriteVersioned(_ context.Context, items []backend.VersionedItem) (int, error) {
	if err := backend.CheckVersions(items); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, backend.ErrClosed
	}
	out, stale, _ := backend.ApplyVersioned(items, func(addr string) (uint64, error) {
		return backend.StoredVersion(b.data[addr]), nil
	})
	for _, it := range out {
		b.data[it.Addr] = it.Value
	}
	return stale, nil
}

// Delete implements backend.Backend.
func (b *Backend) Delete(_ context.Context, addrs []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	for _, a := range addrs {
		delete(b.data, a)
	}
	return nil
}

// Scan implements backend.Backend.
func (b *Backend) Scan(_ context.Context, prefix string, fn func(string) error) error {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return backend.ErrClosed
	}
	var addrs []string
	for a := range b.data {
		if strings.HasPrefix(a, prefix) {
			addrs = append(addrs, a)
		}
	}
	b.mu.RUnlock()
	for _, a := range addrs {
		if err := fn(a); err != nil {
			return err
		}
	}
	return nil
}

// Close implements backend.Backend. A closed in-memory backend keeps its
// data: Reopen makes it usable again, to test restarts.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// Reopen makes a closed backend usable again with the same data.
func (b *Backend) Reopen() {
	b.mu.Lock()
	b.closed = false
	b.mu.Unlock()
}

// Len returns the number of stored addresses.
func (b *Backend) Len() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.data)
}
