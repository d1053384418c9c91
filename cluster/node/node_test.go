package node

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/cluster/raftgroup"
	"github.com/oblivkv/oblivkv/cluster/raftgroup/raftgrouptest"
	"github.com/oblivkv/oblivkv/internal/testsupport/syncbuf"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

// replicas is the size of every group of the tests.
const replicas = 3

// shardGroup is one shard's group of replicas in this process, each with
// its own raft directory, on loopback sockets (plaintext, which raftgroup
// allows on loopback only).
type shardGroup struct {
	t       testing.TB
	keys    *seal.Keys
	root    string
	peers   []raftgroup.Peer
	leaders []Leader
	log     *slog.Logger // the replicas' Follow events
	mu      sync.Mutex   // guards rafts and stops
	rafts   []*raftgroup.Group
	stops   []context.CancelFunc
	done    sync.WaitGroup
}

func newShardGroup(t testing.TB, keys *seal.Keys, log *slog.Logger, leaders []Leader, machine func(i int) raftgroup.Machine) *shardGroup {
	g := &shardGroup{t: t, keys: keys, root: t.TempDir(), leaders: leaders, log: log,
		rafts: make([]*raftgroup.Group, len(leaders)), stops: make([]context.CancelFunc, len(leaders))}
	g.peers = raftgrouptest.Peers(t, len(leaders))
	for i := range leaders {
		g.start(i, machine(i))
	}
	t.Cleanup(func() {
		for i := range g.rafts {
			g.stop(i)
		}
	})
	return g
}

// start starts replica i over machine m, following its leadership.
func (g *shardGroup) start(i int, m raftgroup.Machine) {
	g.t.Helper()
	r, err := raftgroup.Open(raftgroup.Config{ID: g.peers[i].ID, Peers: g.peers, Dir: filepath.Join(g.root, g.peers[i].ID), Keys: g.keys, Timing: raftgrouptest.Timing()}, m)
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.mu.Lock()
	g.rafts[i], g.stops[i] = r, cancel
	g.mu.Unlock()
	log := g.log.With("replica", g.peers[i].ID)
	g.done.Go(func() { Follow(ctx, r, g.leaders[i], log) })
}

// stop stops replica i, as a crash of its process would.
func (g *shardGroup) stop(i int) {
	g.mu.Lock()
	r, stop := g.rafts[i], g.stops[i]
	g.rafts[i] = nil
	g.mu.Unlock()
	if r != nil {
		stop()
		r.Close()
	}
}

// leader returns the replica that leads, -1 if none does.
func (g *shardGroup) leader() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, r := range g.rafts {
		if r != nil && r.IsLeader() {
			return i
		}
	}
	return -1
}

// waitLeader waits for a leader that is not old.
func (g *shardGroup) waitLeader(old int) (int, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if l := g.leader(); l >= 0 && l != old {
			return l, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1, fmt.Errorf("no new leader within a minute (the old one: r%d)", old)
}

// stashProxy reaches a Stash shard's group at whichever replica leads it,
// as the cluster's network does.
type stashProxy struct {
	g     **shardGroup
	nodes []*treebeard.StashNode
}

func (p *stashProxy) node() *treebeard.StashNode {
	if l := (*p.g).leader(); l >= 0 {
		return p.nodes[l]
	}
	return p.nodes[0] // answers as lost in transit: the sender sends again
}

func (p *stashProxy) Access(m treebeard.AccessMsg) treebeard.AccessReply {
	return p.node().Access(m)
}
func (p *stashProxy) EvictionBlocks(m treebeard.EvictionBlocksMsg) treebeard.EvictionBlocksReply {
	return p.node().EvictionBlocks(m)
}
func (p *stashProxy) EvictionDone(m treebeard.EvictionDoneMsg) treebeard.EvictionDoneReply {
	return p.node().EvictionDone(m)
}

// oramProxy does the same for an ORAM shard's group.
type oramProxy struct {
	g     **shardGroup
	nodes []*treebeard.ORAMNode
}

func (p oramProxy) ReadPaths(m treebeard.ReadPathsMsg) treebeard.ReadPathsReply {
	if l := (*p.g).leader(); l >= 0 {
		return p.nodes[l].ReadPaths(m)
	}
	return p.nodes[0].ReadPaths(m)
}

// testCluster is a cluster of 2 Stash groups and 2 ORAM groups of 3
// replicas in this process, each ORAM group on its own storage, and a
// router.
type testCluster struct {
	sh          treebeard.Shape
	stash, oram []*shardGroup
	taps        []*observe.MemoryLog // by ORAM shard: what its storage saw
	router      *treebeard.RouterStore
	events      *syncbuf.Buffer // every replica's Follow events
}

// goroutines returns this process's goroutines grouped by stack, those
// in the cluster's code only: what a stuck test waits on.
func goroutines() string {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	var ours []string
	for _, stack := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(stack, "oblivkv/protocol/treebeard") || strings.Contains(stack, "oblivkv/cluster/") {
			ours = append(ours, stack)
		}
	}
	return strings.Join(ours, "\n\n")
}

func newTestCluster(t testing.TB, epoch time.Duration) *testCluster {
	keys := kvtest.NewKeys(t)
	sh, err := treebeard.NewShape(1024, 64, treebeard.Options{StashShards: 2, ORAMShards: 2, Trees: 4, Routers: 1, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{sh: sh, stash: make([]*shardGroup, 2), oram: make([]*shardGroup, 2), events: &syncbuf.Buffer{}}
	log := slog.New(slog.NewTextHandler(c.events, nil))
	stashes, readers := make([]*stashProxy, 2), make([]treebeard.PathReader, 4)
	sources, shards := make([]treebeard.EvictionSource, 2), make([]treebeard.StashShard, 2)
	for i := range stashes {
		stashes[i] = &stashProxy{g: &c.stash[i]}
		sources[i], shards[i] = stashes[i], stashes[i]
	}
	orams := make([]oramProxy, 2)
	for k := range orams {
		orams[k] = oramProxy{g: &c.oram[k]}
		tap := &observe.MemoryLog{}
		c.taps = append(c.taps, tap)
		storage := observe.NewTap(mem.New(), tap)
		var leaders []Leader
		for range replicas {
			n, err := treebeard.NewORAMNode(sh, k, 2, storage, keys, sources)
			if err != nil {
				t.Fatal(err)
			}
			orams[k].nodes = append(orams[k].nodes, n)
			leaders = append(leaders, n)
		}
		for tr := k; tr < 4; tr += 2 {
			readers[tr] = orams[k]
		}
		c.oram[k] = newShardGroup(t, keys, log, leaders, func(i int) raftgroup.Machine { return orams[k].nodes[i].Machine() })
	}
	for i := range stashes {
		var leaders []Leader
		for range replicas {
			n, err := treebeard.NewStashNode(sh, i, readers)
			if err != nil {
				t.Fatal(err)
			}
			stashes[i].nodes = append(stashes[i].nodes, n)
			leaders = append(leaders, n)
		}
		c.stash[i] = newShardGroup(t, keys, log, leaders, func(r int) raftgroup.Machine { return stashes[i].nodes[r].Machine() })
	}
	c.router = treebeard.NewRouterStore(sh, keys, 0, shards)
	t.Cleanup(func() { c.router.Close() })
	return c
}

// killLeaders stops the leader of each group in turn, once every
// operations more have started, and waits for the group's next leader.
func killLeaders(ctx context.Context, ops *atomic.Int64, every int64, groups ...*shardGroup) error {
	for i, g := range groups {
		for ops.Load() < every*int64(i+1) {
			if ctx.Err() != nil {
				return fmt.Errorf("waiting for %d operations to kill a leader: %w", every*int64(i+1), ctx.Err())
			}
			time.Sleep(10 * time.Millisecond)
		}
		old := g.leader()
		if old < 0 {
			return fmt.Errorf("no leader to kill after %d operations", ops.Load())
		}
		g.stop(old)
		if _, err := g.waitLeader(old); err != nil {
			return err
		}
	}
	return nil
}

// TestReplicatedClusterFailover: concurrent clients' history through a
// cluster whose groups are raft groups of 3 replicas stays linearizable,
// with no request failing and every write read back at the end, while
// the leader of a Stash group, then of an ORAM group, stops mid-run (its
// process crashes): the requests in flight are sent again to the new
// leaders, which finish what the old ones left.
func TestReplicatedClusterFailover(t *testing.T) {
	c := newTestCluster(t, 0)
	for _, g := range append(c.stash, c.oram...) {
		if _, err := g.waitLeader(-1); err != nil {
			t.Fatal(err)
		}
	}
	// A run takes about 10 s; one stuck fails with what it waits on.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stuck := func(err error) {
		t.Helper()
		t.Fatalf("%v\nthe replicas' events:\n%s\nthe goroutines in the cluster's code:\n%s", err, c.events, goroutines())
	}
	if err := c.router.Put(ctx, "warm", []byte("up")); err != nil {
		stuck(err)
	}
	const every = 150 // operations between kills
	var ops atomic.Int64
	kills := make(chan error, 1)
	go func() { kills <- killLeaders(ctx, &ops, every, c.stash[0], c.oram[1]) }()
	var done atomic.Bool
	res, err := kvtest.Linearizable(ctx, c.router, kvtest.LinOptions{Clients: 8, FinalReads: true, MutationFraction: 0.4,
		Until: func() bool {
			if ops.Add(1) > 2*every && len(kills) > 0 {
				done.Store(true)
			}
			return done.Load()
		}})
	if err != nil {
		stuck(err)
	}
	if err := <-kills; err != nil {
		stuck(err)
	}
	t.Logf("%d operations, %v", res.Ops, res.Result)
	if res.Result != "Ok" {
		t.Fatalf("the history is not linearizable: %v (%s)", res.Result, res.Visualization)
	}
	for k, tap := range c.taps {
		if err := quiet(tap); err != nil {
			stuck(fmt.Errorf("ORAM shard %d: %w", k, err))
		}
		if err := c.sh.CheckView(tap.Records()); err != nil {
			t.Errorf("ORAM shard %d's storage saw a view the structural checks refuse: %v", k, err)
		}
	}
}

// quiet waits until storage has seen no call for half a second: the
// trees' last Writes, held for their next Read, are issued on their own
// once the trees are idle. It fails if storage is still busy after a
// minute.
func quiet(tap *observe.MemoryLog) error {
	deadline := time.Now().Add(time.Minute)
	for last := tap.LastSeq(); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		now := tap.LastSeq()
		if now == last {
			return nil
		}
		last = now
	}
	return fmt.Errorf("storage still sees calls a minute after the clients stopped (%d so far)", tap.LastSeq())
}

// BenchmarkReplicatedCluster measures the cluster of newTestCluster (2
// Stash and 2 ORAM groups of 3 replicas, every replica in this process)
// under 64 clients writing and reading 1,024 keys, with the routers'
// epochs of 1, 5 and 10 ms: its CPU per operation is the whole
// cluster's, replication included (-cpuprofile shows where it goes), and
// entries/op the raft entries its groups committed per operation.
func BenchmarkReplicatedCluster(b *testing.B) {
	for _, epoch := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond} {
		b.Run("epoch="+epoch.String(), func(b *testing.B) { benchmarkCluster(b, newTestCluster(b, epoch)) })
	}
}

func benchmarkCluster(b *testing.B, c *testCluster) {
	groups := append(c.stash, c.oram...)
	for _, g := range groups {
		if _, err := g.waitLeader(-1); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(32) // 64 clients on 2 CPUs
	entries, cpu := committed(groups), cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			key := fmt.Sprintf("k%d", i%1024)
			var err error
			if i%2 == 0 {
				err = c.router.Put(ctx, key, []byte("value"))
			} else {
				_, _, err = c.router.Get(ctx, key)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(committed(groups)-entries)/float64(b.N), "entries/op")
	b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
}

// committed sums the commit indexes of groups' leaders: the entries
// their logs hold.
func committed(groups []*shardGroup) uint64 {
	var n uint64
	for _, g := range groups {
		if l := g.leader(); l >= 0 {
			g.mu.Lock()
			n += g.rafts[l].Status().CommitIndex
			g.mu.Unlock()
		}
	}
	return n
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
