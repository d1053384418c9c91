package wire

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/rpc"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

// stash0 is the endpoint the tests' servers serve.
var stash0 = treebeard.Endpoint{Layer: treebeard.LayerStash, Index: 0}

// fixture is example.yaml's cluster with its certificates, the replicas
// of its Stash group 0 each served on a loopback port by a Handler over a
// Receiver whose Stash shard 0 answers every batch with the replica's
// id, and one of them leading.
type fixture struct {
	t       *testing.T
	cfg     *cluster.Config
	certs   string
	keys    *seal.Keys
	seq     atomic.Uint64
	mu      sync.Mutex
	leader  string
	servers map[string]*server
	hold    chan struct{} // when set, every shard waits for it to close
}

// server is one replica's rpc server, and the calls it got.
type server struct {
	rpc   *rpc.Server
	calls atomic.Int32
}

func newFixture(t *testing.T, leader string) *fixture {
	cfg, err := cluster.Load("../example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, cfg: cfg, certs: t.TempDir(), leader: leader, servers: map[string]*server{}}
	if _, err := cluster.WriteCerts(cfg, f.certs, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if f.keys, err = seal.NewKeys(bytes.Repeat([]byte{7}, seal.MasterKeySize)); err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Stash[0].Replicas {
		f.serve(&cfg.Stash[0].Replicas[i])
	}
	return f
}

// serve starts replica r on a loopback port, which becomes its address.
func (f *fixture) serve(r *cluster.Replica) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	r.RPC = ln.Addr().String()
	tlsCfg, err := cluster.ServerTLS(f.certs, r.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	recv := treebeard.NewReceiver(f.keys)
	recv.Serve(stash0, treebeard.Handlers{StashShard: f.shard(r.ID)})
	s := &server{}
	leads := func(treebeard.Endpoint) (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.leader == r.ID, f.leader
	}
	s.rpc = rpc.NewServer(r.ID, tlsCfg, counting{NewHandler(cluster.Static(f.cfg), recv, leads), &s.calls})
	go s.rpc.Serve(ln)
	f.t.Cleanup(s.rpc.Stop)
	f.servers[r.ID] = s
}

// counting is a Handler that counts its calls.
type counting struct {
	rpc.Handler
	calls *atomic.Int32
}

func (c counting) Handle(ctx context.Context, from string, m rpc.Message) (rpc.Message, error) {
	c.calls.Add(1)
	return c.Handler.Handle(ctx, from, m)
}

// shardFunc is a Stash shard of one function.
type shardFunc func(treebeard.AccessMsg) treebeard.AccessReply

func (f shardFunc) Access(m treebeard.AccessMsg) treebeard.AccessReply { return f(m) }

// shard answers every batch with id.
func (f *fixture) shard(id string) treebeard.StashShard {
	return shardFunc(func(m treebeard.AccessMsg) treebeard.AccessReply {
		if f.hold != nil {
			<-f.hold
		}
		return treebeard.AccessReply{Replies: []treebeard.Reply{{Result: kv.Result{Found: true, Old: []byte(id)}}}}
	})
}

func (f *fixture) lead(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader = id
}

// net returns process id's Net.
func (f *fixture) net(id string, opts ...Option) *Net {
	return f.netOf(cluster.Static(f.cfg), id, opts...)
}

// netOf returns process id's Net over live.
func (f *fixture) netOf(live *cluster.Live, id string, opts ...Option) *Net {
	tlsCfg, err := cluster.ClientTLS(f.certs, id, "")
	if err != nil {
		f.t.Fatal(err)
	}
	n := NewNet(live, id, tlsCfg, opts...)
	f.t.Cleanup(func() { n.Close() })
	return n
}

// access sends Stash shard 0 a batch as endpoint as over n, and returns
// the reply.
func (f *fixture) access(n *Net, as treebeard.Endpoint) treebeard.AccessReply {
	id := treebeard.MsgID{Sender: as, Incarnation: 1, Epoch: 1, Seq: f.seq.Add(1)}
	m := treebeard.AccessMsg{ID: id, Batch: []treebeard.Request{{Op: treebeard.OpGet}}}
	return treebeard.NewRemote(f.keys, n, stash0).Access(m)
}

// answered checks that the reply came from replica want.
func (f *fixture) answered(rep treebeard.AccessReply, want string) {
	f.t.Helper()
	if rep.Code != treebeard.CodeOK || len(rep.Replies) != 1 || string(rep.Replies[0].Old) != want {
		f.t.Fatalf("the reply is %+v; want one from %s", rep, want)
	}
}

// calls checks how many calls each replica got so far.
func (f *fixture) calls(want map[string]int32) {
	f.t.Helper()
	for id, n := range want {
		if got := f.servers[id].calls.Load(); got != n {
			f.t.Fatalf("%s got %d calls, want %d (%v)", id, got, n, want)
		}
	}
}

var router0 = treebeard.Endpoint{Layer: treebeard.LayerRouter, Index: 0}

// TestNetFollowsLeader: the first call goes to the group's first
// replica, which does not lead and names the leader; the Net calls the
// leader at once and goes to it straight from then on, until leadership
// moves, when it follows the next redirect.
func TestNetFollowsLeader(t *testing.T) {
	f := newFixture(t, "stash-0-b")
	n := f.net("router-0")
	f.answered(f.access(n, router0), "stash-0-b")
	f.calls(map[string]int32{"stash-0-a": 1, "stash-0-b": 1, "stash-0-c": 0})
	f.answered(f.access(n, router0), "stash-0-b")
	f.calls(map[string]int32{"stash-0-a": 1, "stash-0-b": 2, "stash-0-c": 0})
	f.lead("stash-0-c")
	f.answered(f.access(n, router0), "stash-0-c")
	f.calls(map[string]int32{"stash-0-a": 1, "stash-0-b": 3, "stash-0-c": 1})
}

// TestNetMovesOn: a call to a replica that is stopped, or that knows no
// leader, fails as lost in transit, and the next attempt goes to the
// group's next replica.
func TestNetMovesOn(t *testing.T) {
	f := newFixture(t, "stash-0-a")
	n := f.net("router-0")
	f.answered(f.access(n, router0), "stash-0-a")
	f.servers["stash-0-a"].rpc.Stop()
	f.lead("stash-0-b")
	if rep := f.access(n, router0); rep.Code != treebeard.CodeTransport || !strings.Contains(rep.Detail, "stash-0-a") {
		t.Fatalf("a call to a stopped replica answered %+v; want CodeTransport naming it", rep.Status)
	}
	f.answered(f.access(n, router0), "stash-0-b")
	f.lead("")
	if rep := f.access(n, router0); rep.Code != treebeard.CodeTransport || !strings.Contains(rep.Detail, "not the leader") {
		t.Fatalf("a call while no replica leads answered %+v; want CodeTransport", rep.Status)
	}
	f.lead("stash-0-c")
	f.answered(f.access(n, router0), "stash-0-c")
	f.calls(map[string]int32{"stash-0-a": 1, "stash-0-b": 2, "stash-0-c": 1})
}

// TestNetTimeout: an attempt the replica does not answer in time fails
// as lost in transit after the Net's timeout.
func TestNetTimeout(t *testing.T) {
	f := newFixture(t, "stash-0-a")
	f.hold = make(chan struct{})
	defer close(f.hold)
	n := f.net("router-0", WithTimeout(100*time.Millisecond))
	start := time.Now()
	if rep := f.access(n, router0); rep.Code != treebeard.CodeTransport || !strings.Contains(rep.Detail, "DeadlineExceeded") {
		t.Fatalf("a call the replica holds answered %+v; want CodeTransport, the deadline exceeded", rep.Status)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the call took %v", took)
	}
}

// TestHandlerRefusesImpostor: a process sends only as the endpoints it
// may speak for: a router as itself or the store, a replica as its
// group's Stash shard or trees; any other message is refused, never
// handled.
func TestHandlerRefusesImpostor(t *testing.T) {
	f := newFixture(t, "stash-0-a")
	handled := f.servers["stash-0-a"]
	for _, tc := range []struct {
		process string
		as      treebeard.Endpoint
		ok      bool
	}{
		{"router-0", router0, true},
		{"router-1", router0, false},
		{"router-1", treebeard.Endpoint{Layer: treebeard.LayerStore}, true},
		{"stash-1-a", router0, false},
		{"stash-1-a", treebeard.Endpoint{Layer: treebeard.LayerStash, Index: 1}, true},
		{"stash-1-a", stash0, false},
		{"oram-1-b", treebeard.Endpoint{Layer: treebeard.LayerORAM, Index: 3}, true},
		{"oram-0-b", treebeard.Endpoint{Layer: treebeard.LayerORAM, Index: 3}, false},
		{"oram-0-b", treebeard.Endpoint{Layer: treebeard.LayerStore}, false},
	} {
		before := handled.calls.Load()
		rep := f.access(f.net(tc.process), tc.as)
		if tc.ok {
			f.answered(rep, "stash-0-a")
		} else if rep.Code != treebeard.CodeTransport || !strings.Contains(rep.Detail, "may not send") {
			t.Errorf("%s sending as %v: answered %+v; want a refusal", tc.process, tc.as, rep.Status)
		}
		if got := handled.calls.Load() - before; got != 1 {
			t.Errorf("%s sending as %v: the leader got %d calls, want 1", tc.process, tc.as, got)
		}
	}
}

// TestGroupOf: Stash shard i is served by the i-th Stash group, tree t
// by ORAM group t mod the groups, and nothing else by a group.
func TestGroupOf(t *testing.T) {
	cfg, err := cluster.Load("../example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for e, want := range map[treebeard.Endpoint]*cluster.Group{
		{Layer: treebeard.LayerStash, Index: 1}: &cfg.Stash[1],
		{Layer: treebeard.LayerORAM, Index: 0}:  &cfg.ORAM[0],
		{Layer: treebeard.LayerORAM, Index: 5}:  &cfg.ORAM[1],
		{Layer: treebeard.LayerStash, Index: 2}: nil,
		{Layer: treebeard.LayerORAM, Index: -1}: nil,
		{Layer: treebeard.LayerRouter}:          nil,
		{Layer: treebeard.LayerStore}:           nil,
	} {
		if g, err := groupOf(cfg, e); g != want || (err == nil) != (want != nil) {
			t.Errorf("groupOf(%v) = %p, %v; want %p", e, g, err, want)
		}
	}
}

// TestNetFollowsUnknownLeader: a leader named by a replica that the
// configuration in use does not know (added to the group since the
// process started) is looked up in the configuration file, read again,
// and called at once.
func TestNetFollowsUnknownLeader(t *testing.T) {
	f := newFixture(t, "stash-0-a")
	path, n := f.liveNet("router-0")
	f.answered(f.access(n, router0), "stash-0-a")

	f.cfg.Stash[0].Replicas = append(f.cfg.Stash[0].Replicas, cluster.Replica{ID: "stash-0-d", Raft: "127.0.0.1:1"})
	if _, err := cluster.WriteCerts(f.cfg, f.certs, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	f.serve(&f.cfg.Stash[0].Replicas[3])
	f.writeConfig(path)
	f.lead("stash-0-d")
	f.answered(f.access(n, router0), "stash-0-d")
	f.calls(map[string]int32{"stash-0-a": 2, "stash-0-d": 1})
}

// liveNet writes the fixture's configuration to a file and returns it
// and process id's Net over it, which reads the file again as a running
// process does.
func (f *fixture) liveNet(id string) (string, *Net) {
	f.t.Helper()
	path := filepath.Join(f.t.TempDir(), "cluster.yaml")
	f.writeConfig(path)
	started, err := cluster.Load(path)
	if err != nil {
		f.t.Fatal(err)
	}
	return path, f.netOf(cluster.NewLive(path, started, nil), id)
}

// writeConfig writes the fixture's configuration, with its replicas'
// addresses, to path.
func (f *fixture) writeConfig(path string) {
	f.t.Helper()
	doc, err := yaml.Marshal(f.cfg)
	if err == nil {
		err = os.WriteFile(path, doc, 0o600)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// TestNetRedialsMovedReplica: a replica that moved to another address
// (restarted elsewhere, the configuration file changed) is called at its
// new address once the Net has read the file again, not at the address
// it first dialled.
func TestNetRedialsMovedReplica(t *testing.T) {
	f := newFixture(t, "stash-0-a")
	path, n := f.liveNet("router-0")
	f.answered(f.access(n, router0), "stash-0-a")

	f.servers["stash-0-a"].rpc.Stop()
	f.serve(&f.cfg.Stash[0].Replicas[0]) // another address
	f.writeConfig(path)
	var rep treebeard.AccessReply
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if rep = f.access(n, router0); rep.Code == treebeard.CodeOK {
			break
		}
	}
	f.answered(rep, "stash-0-a")
}
