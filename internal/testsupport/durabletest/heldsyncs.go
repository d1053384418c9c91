package durabletest

import (
	"sync"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/internal/durable"
)

// HeldSyncs is a journal whose Syncs a test counts and can hold, to show
// that nothing is answered or written before the record that allows it is
// durable. While holding, a Sync of a record after the threshold sends
// its LSN on Held and waits for Release (that one Sync) or ReleaseAll
// (every Sync, now and later).
type HeldSyncs struct {
	durable.Journal
	Held    chan uint64
	syncs   atomic.Int64
	holding atomic.Bool
	after   atomic.Uint64
	release chan struct{}
	stop    chan struct{}
	stopped sync.Once
}

// NewHeldSyncs returns j with its Syncs counted, none held yet.
func NewHeldSyncs(j durable.Journal) *HeldSyncs {
	return &HeldSyncs{Journal: j, Held: make(chan uint64), release: make(chan struct{}), stop: make(chan struct{})}
}

// Hold holds every Sync from now on.
func (h *HeldSyncs) Hold() { h.HoldAfter(0) }

// HoldAfter holds, from now on, the Syncs of records after lsn.
func (h *HeldSyncs) HoldAfter(lsn uint64) {
	h.after.Store(lsn)
	h.holding.Store(true)
}

// StopHolding holds no Sync from now on; one held already waits for
// Release.
func (h *HeldSyncs) StopHolding() { h.holding.Store(false) }

// Release lets one held Sync through.
func (h *HeldSyncs) Release() { h.release <- struct{}{} }

// ReleaseAll lets every Sync through from now on, those held included.
func (h *HeldSyncs) ReleaseAll() {
	h.StopHolding()
	h.stopped.Do(func() { close(h.stop) })
}

// Syncs returns how many Syncs were asked for.
func (h *HeldSyncs) Syncs() int64 { return h.syncs.Load() }

// Sync is the journal's, held while the test holds it.
func (h *HeldSyncs) Sync(lsn uint64) error {
	h.syncs.Add(1)
	if h.holding.Load() && lsn > h.after.Load() {
		select {
		case h.Held <- lsn:
			select {
			case <-h.release:
			case <-h.stop:
			}
		case <-h.stop:
		}
	}
	return h.Journal.Sync(lsn)
}
