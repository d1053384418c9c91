package durabletest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
)

// AnchorHolding is storage that, once armed, holds the first anchor write
// (a checkpoint's last step, durable.AnchorAddr) until released: a test
// then knows a checkpoint is under way and can act before it ends.
type AnchorHolding struct {
	backend.Backend
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

// NewAnchorHolding returns an AnchorHolding over b, not armed.
func NewAnchorHolding(b backend.Backend) *AnchorHolding {
	return &AnchorHolding{Backend: b, held: make(chan struct{}), release: make(chan struct{})}
}

// Arm makes the next anchor write wait for Release.
func (h *AnchorHolding) Arm() { h.armed.Store(true) }

// Held is closed once an anchor write is being held.
func (h *AnchorHolding) Held() <-chan struct{} { return h.held }

// Release lets the held anchor write go on; call it once.
func (h *AnchorHolding) Release() { close(h.release) }

// WriteFenced implements backend.Backend; the anchor's write is fenced.
func (h *AnchorHolding) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if len(items) == 1 && items[0].Addr == durable.AnchorAddr && h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
	}
	return h.Backend.WriteFenced(ctx, f, items)
}

// PutUntilHeld arms h and puts keys into s until a checkpoint's anchor
// write is held (s must checkpoint often: after every record, say).
func (h *AnchorHolding) PutUntilHeld(t *testing.T, s kv.Store) {
	t.Helper()
	h.Arm()
	for i := range 10000 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i%20), []byte("v")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.held:
			return
		default:
		}
	}
	t.Fatal("no checkpoint wrote an anchor in 10000 Puts: the test exercised nothing")
}

// CheckCloseWaits closes s while the anchor write is held and fails t if
// Close returns before the write is released: a closed store must touch
// storage no more. It then releases the write and waits for Close.
func (h *AnchorHolding) CheckCloseWaits(t *testing.T, s kv.Store) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		h.Release()
		t.Fatalf("Close returned (%v) while a checkpoint's anchor write was in flight", err)
	case <-time.After(200 * time.Millisecond): // Close must wait however long the write takes
	}
	h.Release()
	<-closed
}
