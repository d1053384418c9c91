package treebeard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestTwoInFlightLinearizable: with two operations of a tree in flight
// (TestingKnobs.InFlight) on storage 2 ms away, 16 clients' GETs, SETs
// and DELs, half on one hot key, are linearizable, while 48 more keep
// writing keys of their own so that epochs queue behind each operation
// and the next starts while the Read of the one before is out; and
// operations did start beside others.
func TestTwoInFlightLinearizable(t *testing.T) {
	o := Options{Trees: 2, Epoch: 200 * time.Microsecond, TestingKnobs: TestingKnobs{InFlight: 2}}
	s, err := open(t.Context(), kv.Env{Backend: backend.WithLatency(mem.New(), 2*time.Millisecond), Keys: kvtest.NewKeys(t),
		Capacity: 1 << 14, ValueSize: 32, Fresh: true, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	var load sync.WaitGroup
	for i := range 48 {
		load.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				if err := s.Put(ctx, fmt.Sprintf("load/%d", i), []byte(fmt.Sprint(n))); err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		})
	}
	kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
	stop()
	load.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var beside, ops uint64
	for _, w := range s.workers {
		st := w.tree.Stats()
		beside, ops = beside+w.tree.StartedBeside(), ops+st.MultiReads+st.Evictions
	}
	if beside < 20 {
		t.Fatalf("%d of %d operations started beside another: too few to tell", beside, ops)
	}
	t.Logf("%d of %d operations started beside another", beside, ops)
}
