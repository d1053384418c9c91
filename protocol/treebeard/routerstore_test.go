package treebeard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// lostShard is a Stash shard's group that no call reaches (no leader, or
// every replica gone): each Access is lost in transit.
type lostShard struct{ calls atomic.Int64 }

func (s *lostShard) Access(AccessMsg) AccessReply {
	s.calls.Add(1)
	return AccessReply{Status: Status{Code: CodeTransport, Detail: "no replica answers"}}
}

// TestRouterStoreCloseGivesUp: a router whose Stash shard no call reaches
// closes once closeGrace has passed on its clock, and the request it was
// sending again fails (its outcome unknown to the client) instead of
// holding the router's shutdown for ever.
func TestRouterStoreCloseGivesUp(t *testing.T) {
	clock := clockwork.NewFakeClock()
	shard := &lostShard{}
	s := newRouterStore(testShape(t, Options{StashShards: 1, Epoch: -1}), kvtest.NewKeys(t), 0, []StashShard{shard}, clock)
	put := make(chan error, 1)
	go func() { put <- s.Put(context.Background(), "k", []byte("v")) }()
	for shard.calls.Load() < 2 { // sent, lost, and sent again
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned with a request in flight before its grace")
	case <-time.After(50 * time.Millisecond):
	}
	waiting, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := clock.BlockUntilContext(waiting, 1); err != nil {
		t.Fatalf("Close waits on no timer: %v", err)
	}
	clock.Advance(closeGrace)
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close still waits a minute after its grace")
	}
	if err := <-put; err == nil {
		t.Fatal("the request the router could not deliver succeeded")
	} else {
		t.Logf("the request in flight: %v", err)
	}
}
