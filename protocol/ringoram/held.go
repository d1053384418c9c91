package ringoram

import (
	"fmt"
	"slices"
	"sync"

	"github.com/oblivkv/oblivkv/backend"
)

// heldWrites are the Writes of committed operations not on storage yet,
// in the order they committed (Driver.Hold): they go, all together and
// first, with the next Read that carries them (backend.Pipeline), or on
// their own at Flush. A Read that fails gives them back, so the Read
// issued again carries them again. Reads of operations beside others may
// run at once, so the Writes are taken under a lock: each goes with one
// Read at a time.
type heldWrites struct {
	mu      sync.Mutex
	items   []backend.Item
	durable []func() error // make the records announcing items durable, before items go out
}

// hold adds a committed operation's sealed Write, whose record durable
// makes durable (nil: it is).
func (h *heldWrites) hold(items []backend.Item, durable func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.items = append(h.items, items...)
	if durable != nil {
		h.durable = append(h.durable, durable)
	}
}

// take returns the Writes held, their records made durable, and holds
// none; on an error it keeps them.
func (h *heldWrites) take() ([]backend.Item, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.durable) > 0 {
		if err := h.durable[0](); err != nil {
			return nil, fmt.Errorf("ringoram: journaling the previous operation: %w", err)
		}
		h.durable = h.durable[1:]
	}
	items := h.items
	h.items = nil
	return items, nil
}

// giveBack holds items again, ahead of any held since they were taken:
// storage may or may not hold them.
func (h *heldWrites) giveBack(items []backend.Item) {
	if len(items) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.items = slices.Concat(items, h.items)
}
