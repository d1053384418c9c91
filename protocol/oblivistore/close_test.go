package oblivistore

import (
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
)

// TestCloseWaitsForABackgroundCheckpoint: a machine's checkpoint under way
// in the background ends before Close returns, also when the store broke
// (its journal failed) and Close writes no checkpoint of its own: a closed
// store touches storage no more.
func TestCloseWaitsForABackgroundCheckpoint(t *testing.T) {
	r := newCrashRig(t, 64)
	var h *durabletest.AnchorHolding
	r.wrap = func(b backend.Backend) backend.Backend { h = durabletest.NewAnchorHolding(b); return h }
	r.every = 1
	r.open(true)
	h.PutUntilHeld(t, r.s)
	r.j.Crash()
	if err := r.s.Put(t.Context(), "k0", []byte("w")); err == nil {
		t.Fatal("a Put after the journal crashed was acknowledged")
	}
	h.CheckCloseWaits(t, r.s)
}
