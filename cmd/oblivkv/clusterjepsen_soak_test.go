//go:build soak

package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// jepsenRounds and jepsenRound shape TestClusterJepsen: rounds of a
// minute, each its own history (porcupine checks each alone), 10 minutes
// in all.
const (
	jepsenRounds = 10
	jepsenRound  = time.Minute
)

// TestClusterJepsen: for 10 minutes, a fault every 2 to 6 s hits a random
// process of the cluster (kill -9 and a restart 1 to 3 s later, or
// SIGSTOP and SIGCONT 1 to 3 s later; never two at once in one group, so
// each group keeps a majority) under 16 clients through both routers.
// Each minute's history is linearizable, no operation fails but those a
// dead or paused router cut off, and at the end each ORAM group's merged
// tap passes the structural checks and its storage accepted no fenced
// write below a token it had accepted.
func TestClusterJepsen(t *testing.T) {
	c := startLedCluster(t)
	store := c.clients()
	defer store.Close()
	seed := kvtest.Seed(t)
	stop := make(chan struct{})
	faults := make(chan int, 1)
	go func() { faults <- c.injectFaults(rand.New(rand.NewPCG(seed, kvtest.ScheduleStream)), stop) }()
	for round := range jepsenRounds {
		end := time.Now().Add(jepsenRound)
		res, err := kvtest.Linearizable(t.Context(), store, kvtest.LinOptions{Clients: 16, AllowErrors: true,
			Keys: 16, HotFraction: 0.2, MutationFraction: 0.4, RESPResults: true, Seed: seed + uint64(round),
			KeyPrefix: fmt.Sprintf("round%d/", round), Pause: 5 * time.Millisecond, Timeout: 5 * time.Minute,
			Until: func() bool { return time.Now().After(end) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d operations, %d failed (first: %v); porcupine: %v", round, res.Ops, res.Errors, res.FirstErr, res.Result)
		if res.Result != porcupine.Ok {
			t.Fatalf("round %d's history is not linearizable: %v; visualization: %s", round, res.Result, res.Visualization)
		}
	}
	close(stop)
	t.Logf("%d faults", <-faults)
	for _, id := range c.ids() { // every process back, so the trees' last Writes are issued
		c.ensureRunning(id)
	}
	c.checkViews()
	c.checkFences("oram-0")
	c.checkFences("oram-1")
}

// injectFaults hits a random process every 2 to 6 s until stop, and
// returns how many faults it injected.
func (c *clusterProcs) injectFaults(r *rand.Rand, stop <-chan struct{}) int {
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-time.After(time.Duration(2000+r.IntN(4000)) * time.Millisecond):
		}
		ids := c.ids()
		id := ids[r.IntN(len(ids))]
		down := time.Duration(1000+r.IntN(2000)) * time.Millisecond
		if r.IntN(2) == 0 {
			c.kill(id)
			time.Sleep(down)
			c.restart(id)
		} else {
			c.pause(id, down)
		}
		n++
	}
}

// ids lists the cluster's processes.
func (c *clusterProcs) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id := range c.procs {
		ids = append(ids, id)
	}
	return ids
}

// pause stops process id (SIGSTOP) for d, then lets it go on.
func (c *clusterProcs) pause(id string, d time.Duration) {
	c.mu.Lock()
	p := c.procs[id]
	c.mu.Unlock()
	p.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	p.cmd.Process.Signal(syscall.SIGCONT)
}

// ensureRunning starts process id again if it is not running.
func (c *clusterProcs) ensureRunning(id string) {
	c.mu.Lock()
	alive := c.procs[id].alive
	c.mu.Unlock()
	if !alive {
		c.restart(id)
	}
	if strings.HasPrefix(id, "router") {
		waitListening(c.t, c.routes[int(id[len(id)-1]-'0')])
	}
}
