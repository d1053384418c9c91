package membership

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/raftgroup"
	"github.com/oblivkv/oblivkv/cluster/rpc"
)

// fakeGroups is the raft state the fixture's replicas share: which one
// leads, and the members.
type fakeGroups struct {
	mu      sync.Mutex
	leader  string
	members []raftgroup.Peer
	// stepDownOnRemove: a leader that removes a replica then loses its
	// leadership to the first member left, and says it lost it, as
	// raft's future may once the change is replicated.
	stepDownOnRemove bool
	left             map[string]bool // replicas told they were removed (Leave)
}

// fakeGroup is one replica's view of fakeGroups.
type fakeGroup struct {
	*fakeGroups
	self string
}

func (g fakeGroup) AddVoter(p raftgroup.Peer) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members = append(g.members, p)
	return nil
}

func (g fakeGroup) RemoveServer(id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, p := range g.members {
		if p.ID == id {
			g.members = append(g.members[:i:i], g.members[i+1:]...)
		}
	}
	if g.stepDownOnRemove {
		g.leader = g.members[0].ID
		return raftgroup.ErrNotLeader
	}
	return nil
}

func (g fakeGroup) Members() ([]raftgroup.Peer, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]raftgroup.Peer(nil), g.members...), nil
}

func (g fakeGroup) Leader() (string, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leader, ""
}

func (g fakeGroup) IsLeader() bool {
	id, _ := g.Leader()
	return id == g.self
}

func (g fakeGroup) Leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.left[g.self] = true
}

func (g fakeGroup) Status() raftgroup.Status {
	return raftgroup.Status{State: "Follower", Term: 1, CommitIndex: 9, AppliedIndex: 9}
}

// passed is the process's own Handler: it answers every message with
// its kind.
type passed struct{}

func (passed) Handle(_ context.Context, _ string, m rpc.Message) (rpc.Message, error) {
	return rpc.Message{Kind: m.Kind}, nil
}

// fixture is example.yaml's cluster with its certificates and key, the
// replicas of its Stash group 0 served on loopback by Handlers over one
// fakeGroups, led by stash-0-b, whose members are stash-0-a and -b.
type fixture struct {
	ctx    context.Context // the test's, ended after 10 s
	cfg    *cluster.Config
	groups *fakeGroups
	admin  *Admin
}

func newFixture(t *testing.T) *fixture {
	cfg, err := cluster.Load("../example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certs, cfg.Key = t.TempDir(), filepath.Join(t.TempDir(), "key")
	if _, err := cluster.WriteCerts(cfg, cfg.Certs, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.EnsureKey(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	f := &fixture{ctx: ctx, cfg: cfg, groups: &fakeGroups{leader: "stash-0-b", left: map[string]bool{}}}
	for i := range cfg.Stash[0].Replicas {
		r := &cfg.Stash[0].Replicas[i]
		if i < 2 {
			f.groups.members = append(f.groups.members, raftgroup.Peer{ID: r.ID, Addr: r.Raft})
		}
		f.serve(t, r)
	}
	if f.admin, err = NewAdmin(cfg, false); err != nil {
		t.Fatal(err)
	}
	return f
}

// serve serves replica r on a loopback port, which becomes its address.
func (f *fixture) serve(t *testing.T, r *cluster.Replica) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.RPC = ln.Addr().String()
	tlsCfg, err := cluster.ServerTLS(f.cfg.Certs, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := cluster.ReadKeys(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(passed{}, r.ID, keys, fakeGroup{f.groups, r.ID}, cluster.Static(f.cfg))
	s := rpc.NewServer(r.ID, tlsCfg, h)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
}

func (f *fixture) memberIDs() string {
	f.groups.mu.Lock()
	defer f.groups.mu.Unlock()
	var ids []string
	for _, p := range f.groups.members {
		ids = append(ids, p.ID)
	}
	return strings.Join(ids, ",")
}

// TestAddFollowsLeader: add-voter asks the group's first replica, which
// names the leader, and the leader adds the replica; a second add
// changes nothing; members lists the leader's view.
func TestAddFollowsLeader(t *testing.T) {
	f := newFixture(t)
	reply, err := f.admin.Add(f.ctx, "stash-0-c")
	if err != nil || !reply.Changed || reply.Self.ID != "stash-0-b" || f.memberIDs() != "stash-0-a,stash-0-b,stash-0-c" {
		t.Fatalf("Add = %+v, %v; members %s: want stash-0-c added by stash-0-b", reply, err, f.memberIDs())
	}
	if reply, err = f.admin.Add(f.ctx, "stash-0-c"); err != nil || reply.Changed {
		t.Fatalf("a second Add = %+v, %v; want no change", reply, err)
	}
	leader, members, err := f.admin.Members(f.ctx, "stash-0-a")
	if err != nil || leader != "stash-0-b" || len(members) != 3 || !members[2].Up || members[2].AppliedIndex != 9 {
		t.Fatalf("Members = %s, %+v, %v", leader, members, err)
	}
}

// TestRefusals: an id no group of the file has, a replica the leader's
// own file does not name, and the removal of a group's last member are
// refused, and the group left as it was.
func TestRefusals(t *testing.T) {
	f := newFixture(t)
	if _, err := f.admin.Add(f.ctx, "stash-0-z"); err == nil || !strings.Contains(err.Error(), `no replica "stash-0-z"`) {
		t.Errorf("Add of an unknown id: %v", err)
	}
	view := *f.cfg // the operator's file names stash-0-e; the replicas' do not
	view.Stash = slices.Clone(f.cfg.Stash)
	view.Stash[0].Replicas = append(slices.Clone(view.Stash[0].Replicas), cluster.Replica{ID: "stash-0-e", RPC: "127.0.0.1:1", Raft: "127.0.0.1:2"})
	operator := &Admin{cfg: &view, keys: f.admin.keys}
	if _, err := operator.Add(f.ctx, "stash-0-e"); err == nil || !strings.Contains(err.Error(), "stash-0-e is not a replica of stash-0 in the configuration file stash-0-b reads") {
		t.Errorf("Add of a replica the leader's file does not name: %v", err)
	}
	if _, err := f.admin.Remove(f.ctx, "stash-0-a"); err != nil {
		t.Fatal(err)
	}
	_, err := f.admin.Remove(f.ctx, "stash-0-b")
	if err == nil || !strings.Contains(err.Error(), "would leave its group empty") || f.memberIDs() != "stash-0-b" {
		t.Errorf("Remove of the last member: %v (members %s)", err, f.memberIDs())
	}
}

// TestRemoveAnswerLost: the leader removes itself and steps down before
// it answers, so the retry that answers, the new leader's, finds nothing
// to remove; Remove still reports the change, since the leader's
// configuration had the replica when it began, and tells the replica it
// was removed, which it may never see itself. A second Remove changes
// nothing and says so, and a Remove of a replica never added tells it
// nothing.
func TestRemoveAnswerLost(t *testing.T) {
	f := newFixture(t)
	f.groups.stepDownOnRemove = true
	reply, err := f.admin.Remove(f.ctx, "stash-0-b")
	if err != nil || !reply.Changed || reply.Self.ID != "stash-0-a" || f.memberIDs() != "stash-0-a" {
		t.Fatalf("Remove of the leader = %+v, %v; members %s: want stash-0-b removed, answered by stash-0-a", reply, err, f.memberIDs())
	}
	if !f.groups.left["stash-0-b"] || f.groups.left["stash-0-a"] {
		t.Fatalf("replicas told they were removed: %v; want stash-0-b only", f.groups.left)
	}
	if reply, err = f.admin.Remove(f.ctx, "stash-0-b"); err != nil || reply.Changed {
		t.Fatalf("a second Remove = %+v, %v; want no change", reply, err)
	}
	if reply, err = f.admin.Remove(f.ctx, "stash-0-c"); err != nil || reply.Changed || f.groups.left["stash-0-c"] {
		t.Fatalf("Remove of a replica never added = %+v, %v; told to stop: %v; want no change, and it left alone (it may be waiting to join)", reply, err, f.groups.left["stash-0-c"])
	}
}

// TestLeaveNamesItsReplica: a replica told to stop as another one
// refuses, and does not stop.
func TestLeaveNamesItsReplica(t *testing.T) {
	f := newFixture(t)
	r := f.cfg.Stash[0].Replicas[0]
	if _, err := f.admin.Ask(f.ctx, r, Request{Op: OpLeave, ID: "stash-0-b"}); err == nil || !strings.Contains(err.Error(), `stash-0-a was asked to stop as "stash-0-b"`) || len(f.groups.left) > 0 {
		t.Fatalf("leave sent to stash-0-a for stash-0-b: %v; told: %v", err, f.groups.left)
	}
}

// TestOnlyAdmin: a process's own certificate may not send a membership
// request, even sealed under the store key; its other messages pass to
// the process's Handler.
func TestOnlyAdmin(t *testing.T) {
	f := newFixture(t)
	r := f.cfg.Stash[0].Replicas[1]
	tlsCfg, err := cluster.ClientTLS(f.cfg.Certs, "router-0", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rpc.Dial("router-0", r.ID, r.RPC, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := sealMessage(f.admin.keys, KindRequest, r.ID, Request{Op: OpRemove, ID: "stash-0-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(f.ctx, m); err == nil || !strings.Contains(err.Error(), "only the operator's certificate") {
		t.Fatalf("router-0's membership request: %v; want a refusal", err)
	}
	if f.memberIDs() != "stash-0-a,stash-0-b" {
		t.Fatalf("members %s after a refused request", f.memberIDs())
	}
	if reply, err := c.Call(f.ctx, rpc.Message{Kind: 3}); err != nil || reply.Kind != 3 {
		t.Fatalf("router-0's other message: %+v, %v; want it passed on", reply, err)
	}
}
