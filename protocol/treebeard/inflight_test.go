package treebeard

import (
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestTwoInFlightLinearizable: with two operations of a tree in flight
// (TestingKnobs.InFlight) on storage 2 ms away, so that a tree's next
// operation starts while the Read of the one before is out, 16 clients'
// GETs, SETs and DELs, half on one hot key, are linearizable, and
// operations did start beside others.
func TestTwoInFlightLinearizable(t *testing.T) {
	o := Options{Trees: 2, A: 8, K: 2, Epoch: 200 * time.Microsecond, TestingKnobs: TestingKnobs{InFlight: 2}}
	s, err := open(t.Context(), kv.Env{Backend: backend.WithLatency(mem.New(), 2*time.Millisecond), Keys: kvtest.NewKeys(t),
		Capacity: 1 << 14, ValueSize: 32, Fresh: true, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
	var beside, ops uint64
	for _, w := range s.workers {
		st := w.tree.Stats()
		beside, ops = beside+st.Beside, ops+st.MultiReads+st.Evictions
	}
	if beside < 20 {
		t.Fatalf("%d of %d operations started beside another: too few to tell", beside, ops)
	}
	t.Logf("%d of %d operations started beside another", beside, ops)
}
