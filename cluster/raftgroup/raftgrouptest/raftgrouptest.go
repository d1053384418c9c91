// Package raftgrouptest helps tests run raft groups in one process, on
// loopback sockets: free addresses for a group's replicas and timing a
// loaded test machine keeps a leader under. It is imported by tests
// only.
package raftgrouptest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/cluster/raftgroup"
)

// Addr returns a loopback address no socket listens on now.
func Addr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Peers returns n replicas, r0 to r(n-1), on free loopback addresses.
func Peers(t testing.TB, n int) []raftgroup.Peer {
	peers := make([]raftgroup.Peer, n)
	for i := range peers {
		peers[i] = raftgroup.Peer{ID: fmt.Sprintf("r%d", i), Addr: Addr(t)}
	}
	return peers
}

// Timing is raftgroup.LANTiming made slower, so that a leader stays
// leader on a loaded machine where a process may stall for hundreds of
// milliseconds.
func Timing() raftgroup.Timing {
	t := raftgroup.LANTiming
	t.Heartbeat, t.Election, t.LeaderLease = time.Second, time.Second, 500*time.Millisecond
	return t
}
