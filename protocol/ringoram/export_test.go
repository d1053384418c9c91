package ringoram

import (
	"testing"

	"github.com/oblivkv/oblivkv/observe"
)

// Leak is an injected flaw (leak.go), for the audits' leak tests.
type Leak = leak

// The leaks, and none.
const (
	NoLeak                = noLeak
	LeakRealsInFirstSlots = leakRealsInFirstSlots
	LeakDummiesInOrder    = leakDummiesInOrder
)

// Placed is where a rewrite put one real block of a bucket: its slot of
// the bucket's Slots, and its place among the Of real blocks in the order
// the rewrite took them (audit.Placement's fields).
type Placed struct{ Slot, Slots, Gathered, Of int }

// Chose is a dummy a path read took: its rank among the bucket's Unread
// valid dummies, in slot order (audit.Choice's fields).
type Chose struct{ Rank, Unread int }

// SlotRun is a randomized run for the audits of where slots lie
// (slots_test.go, in package ringoram_test).
type SlotRun struct {
	Records []observe.Record // storage's view after the load (Init)
	Offsets []int            // per slot index: how often path reads read it
	Placed  []Placed         // by the trusted metadata
	Chose   []Chose          // by the trusted metadata
	Layout  Layout
}

// RandomSlots runs ops of the randomized test's random operations on a
// tree of p holding 300 blocks, with lk injected.
func RandomSlots(t *testing.T, p Params, ops int, lk Leak) SlotRun {
	truth := &slotTruth{}
	f := randomized(t, p, 0, ops, 300, lk, truth)
	recs := f.log.Records()
	loaded := 0
	for loaded < len(recs) && recs[loaded].Op == observe.OpWrite { // Init's
		loaded++
	}
	return SlotRun{Records: recs[loaded:], Offsets: f.aud.offsets, Placed: truth.placed, Chose: truth.chose, Layout: f.cfg.Layout}
}
