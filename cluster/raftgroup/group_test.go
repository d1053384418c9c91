package raftgroup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/seal"
	"github.com/prometheus/client_golang/prometheus"
)

// chain is a test machine: its state is a hash over every entry applied,
// in order, and a count; Apply returns the count.
type chain struct {
	mu      sync.Mutex
	sum     [32]byte
	count   uint64
	delay   time.Duration // each Apply takes this long
	applies chan struct{} // if set, closed when the next Apply begins
}

func (c *chain) Apply(entry []byte) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applies != nil {
		close(c.applies)
		c.applies = nil
	}
	time.Sleep(c.delay)
	if bytes.Equal(entry, []byte("refuse")) {
		return nil, errors.New("refused")
	}
	c.sum = sha256.Sum256(append(c.sum[:], entry...))
	c.count++
	return c.count, nil
}

func (c *chain) Snapshot() ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return binary.BigEndian.AppendUint64(append([]byte(nil), c.sum[:]...), c.count), nil
}

func (c *chain) Restore(s []byte) error {
	if len(s) != 40 {
		return fmt.Errorf("snapshot of %d bytes", len(s))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	copy(c.sum[:], s)
	c.count = binary.BigEndian.Uint64(s[32:])
	return nil
}

// testGroup is a group of replicas in this process, on loopback sockets
// under mutual TLS with certificates of a cluster CA.
type testGroup struct {
	t        *testing.T
	keys     *seal.Keys
	peers    []Peer
	root     string
	certs    string
	replicas map[string]*Group
	machines map[string]*chain
}

// fastTiming elects in well under a second on an idle machine and keeps
// leaders on a loaded one.
var fastTiming = Timing{Heartbeat: 200 * time.Millisecond, Election: 200 * time.Millisecond, LeaderLease: 100 * time.Millisecond}

func newTestGroup(t *testing.T, n int) *testGroup {
	t.Helper()
	master, err := seal.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := seal.NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	g := &testGroup{t: t, keys: keys, root: t.TempDir(), replicas: map[string]*Group{}, machines: map[string]*chain{}}
	cfg := &cluster.Config{}
	var replicas []cluster.Replica
	for i := range n {
		p := Peer{ID: fmt.Sprintf("r%d", i), Addr: freeAddr(t)}
		g.peers = append(g.peers, p)
		replicas = append(replicas, cluster.Replica{ID: p.ID, RPC: freeAddr(t), Raft: p.Addr})
	}
	cfg.Stash = []cluster.Group{{Replicas: replicas}}
	g.certs = filepath.Join(g.root, "certs")
	if _, err := cluster.WriteCerts(cfg, g.certs, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range g.peers {
		g.start(p.ID)
	}
	t.Cleanup(g.closeAll)
	return g
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// config is replica id's configuration.
func (g *testGroup) config(id string) Config {
	srv, err := cluster.ServerTLS(g.certs, id)
	if err != nil {
		g.t.Fatal(err)
	}
	return Config{ID: id, Peers: g.peers, Dir: filepath.Join(g.root, id), Keys: g.keys, Timing: fastTiming,
		ServerTLS: srv, ClientTLS: func(addr string) (*tls.Config, error) {
			for _, p := range g.peers {
				if p.Addr == addr {
					return cluster.ClientTLS(g.certs, id, p.ID)
				}
			}
			return nil, fmt.Errorf("no replica at %s", addr)
		}}
}

func (g *testGroup) start(id string) { g.startWith(id, false) }

// startWith starts replica id, joining a running group if join.
func (g *testGroup) startWith(id string, join bool) {
	g.t.Helper()
	m := &chain{}
	cfg := g.config(id)
	cfg.Join = join
	r, err := Open(cfg, m)
	if err != nil {
		g.t.Fatal(err)
	}
	g.replicas[id], g.machines[id] = r, m
}

func (g *testGroup) stop(id string) {
	g.t.Helper()
	if err := g.replicas[id].Close(); err != nil {
		g.t.Fatal(err)
	}
	delete(g.replicas, id)
}

func (g *testGroup) closeAll() {
	for id := range g.replicas {
		g.stop(id)
	}
}

// leader waits for a leader among the running replicas.
func (g *testGroup) leader() string {
	g.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for id, r := range g.replicas {
			if r.IsLeader() {
				return id
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	g.t.Fatal("no leader within 30 s")
	return ""
}

// propose proposes entries through the leader, following it if it moves.
func (g *testGroup) propose(entries ...string) {
	g.t.Helper()
	for _, e := range entries {
		for attempt := 0; ; attempt++ {
			_, err := g.replicas[g.leader()].Propose(context.Background(), []byte(e))
			if err == nil {
				break
			}
			if !errors.Is(err, ErrNotLeader) || attempt == 20 {
				g.t.Fatal(err)
			}
		}
	}
}

// convergeWithin bounds how long converged waits. A replica restarted
// after its leader failed to reach it for a while is retried by raft
// only after a backoff that doubles with each failure, up to about 10 s
// (hashicorp/raft's replication backoff); on a loaded machine the
// catch-up after it once took over 30 s.
const convergeWithin = time.Minute

// converged waits until every running replica has applied want entries
// and checks their states are byte-identical.
func (g *testGroup) converged(want uint64) {
	g.t.Helper()
	deadline := time.Now().Add(convergeWithin)
	for {
		var snaps [][]byte
		done := true
		for id := range g.replicas {
			s, _ := g.machines[id].Snapshot()
			snaps = append(snaps, s)
			done = done && binary.BigEndian.Uint64(s[32:]) == want
		}
		if done {
			for _, s := range snaps[1:] {
				if !bytes.Equal(s, snaps[0]) {
					g.t.Fatal("replicas applied the same number of entries and reached different states")
				}
			}
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("replicas did not all apply %d entries within %v", want, convergeWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func entries(prefix string, n int) []string {
	var es []string
	for i := range n {
		es = append(es, fmt.Sprintf("%s-%d", prefix, i))
	}
	return es
}

// TestProposeReturnsOnClose: a Propose whose entry the machine is still
// applying returns with an error once its replica closes, without waiting
// for raft, which leaves unanswered what it had not applied when it shut
// down.
func TestProposeReturnsOnClose(t *testing.T) {
	g := newTestGroup(t, 1)
	id := g.leader()
	const apply = 3 * time.Second
	m, applies := g.machines[id], make(chan struct{})
	m.mu.Lock()
	m.delay, m.applies = apply, applies
	m.mu.Unlock()
	proposed := make(chan error, 1)
	go func() {
		_, err := g.replicas[id].Propose(context.Background(), []byte("slow"))
		proposed <- err
	}()
	<-applies // the entry is committed and being applied
	closing, closed := time.Now(), make(chan error, 1)
	go func() { closed <- g.replicas[id].Close() }()
	select {
	case err := <-proposed:
		if err == nil {
			t.Fatal("a Propose cut short by Close reported success")
		}
		t.Logf("returned %v after Close began: %v", time.Since(closing).Round(time.Millisecond), err)
	case <-time.After(apply - time.Second):
		t.Fatalf("Propose still waits %v after its replica began closing", apply-time.Second)
	}
	if err := <-closed; err != nil { // once the machine's apply ends
		t.Fatal(err)
	}
	delete(g.replicas, id)
}

func TestReplicasConverge(t *testing.T) {
	g := newTestGroup(t, 3)
	g.propose(entries("a", 50)...)
	g.converged(50)
	leader := g.replicas[g.leader()]
	out, err := leader.Propose(context.Background(), []byte("one more"))
	if err != nil || out.(uint64) != 51 {
		t.Fatalf("Propose = %v, %v; want the machine's output 51", out, err)
	}
	if _, err := leader.Propose(context.Background(), []byte("refuse")); err == nil || err.Error() != "refused" {
		t.Fatalf("Propose of an entry the machine refuses = %v, want its error", err)
	}
	for id, r := range g.replicas {
		if !r.IsLeader() {
			if _, err := r.Propose(context.Background(), []byte("x")); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("Propose on follower %s = %v, want ErrNotLeader", id, err)
			}
		}
	}
}

func TestLeaderFailover(t *testing.T) {
	g := newTestGroup(t, 3)
	g.propose(entries("a", 20)...)
	old := g.leader()
	term := g.replicas[old].Status().Term
	g.stop(old)
	g.propose(entries("b", 20)...)
	if next := g.leader(); next == old || g.replicas[next].Status().Term <= term {
		t.Fatalf("leader %s in term %d after %s of term %d stopped", next, g.replicas[next].Status().Term, old, term)
	}
	g.start(old) // from its directory: it catches up
	g.converged(40)
}

// TestBarrierAppliesCommitted: a leader elected after its predecessor
// stopped has, once Barrier returns, applied every entry the predecessor
// committed, though its machine applies slowly and was behind; a
// follower's Barrier is refused as not leading.
func TestBarrierAppliesCommitted(t *testing.T) {
	g := newTestGroup(t, 3)
	leader := g.leader()
	for id, m := range g.machines { // the followers' machines fall behind the leader's
		if id != leader {
			m.mu.Lock()
			m.delay = 5 * time.Millisecond
			m.mu.Unlock()
		}
	}
	g.propose(entries("a", 200)...)
	g.stop(leader)
	next := g.leader()
	if err := g.replicas[next].Barrier(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, _ := g.machines[next].Snapshot(); binary.BigEndian.Uint64(s[32:]) != 200 {
		t.Fatalf("the new leader applied %d of the 200 entries committed before its Barrier returned", binary.BigEndian.Uint64(s[32:]))
	}
	for id, r := range g.replicas {
		if id != next {
			if err := r.Barrier(t.Context()); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("a follower's Barrier: %v, want %v", err, ErrNotLeader)
			}
		}
	}
}

func TestSnapshotInstallsOnANewReplica(t *testing.T) {
	g := newTestGroup(t, 3)
	g.propose(entries("a", 30)...)
	for _, r := range g.replicas {
		if err := r.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	// A replica whose directory is lost comes back empty and is sent the
	// leader's snapshot.
	victim := g.peers[0].ID
	if victim == g.leader() {
		victim = g.peers[1].ID
	}
	g.stop(victim)
	if err := os.RemoveAll(filepath.Join(g.root, victim)); err != nil {
		t.Fatal(err)
	}
	g.propose(entries("b", 5)...)
	g.start(victim)
	g.converged(35)
	if s := g.replicas[victim].Status(); s.LastSnapshot == 0 && s.AppliedIndex == 0 {
		t.Fatalf("the new replica has applied nothing: %+v", s)
	}
}

// TestSealedAtRest: no entry's or snapshot's content is in any file of a
// replica's directory.
func TestSealedAtRest(t *testing.T) {
	g := newTestGroup(t, 3)
	const marker = "PLAINTEXT-MARKER-7f3a"
	g.propose(entries(marker, 20)...)
	for _, r := range g.replicas {
		if err := r.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	g.propose(entries(marker+"-after", 5)...)
	g.converged(25)
	g.closeAll()
	files := 0
	err := filepath.WalkDir(g.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(path, string(filepath.Separator)+"certs"+string(filepath.Separator)) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(data, []byte(marker)) {
			t.Errorf("%s holds an entry in plaintext", path)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walked %d files: %v", files, err)
	}
}

func TestWrongKeyRefused(t *testing.T) {
	g := newTestGroup(t, 1)
	g.propose(entries("a", 3)...)
	g.stop("r0")
	other, _ := seal.GenerateMaster()
	keys, _ := seal.NewKeys(other)
	cfg := g.config("r0")
	cfg.Keys = keys
	if _, err := Open(cfg, &chain{}); err == nil || !strings.Contains(err.Error(), "does not open under this store's key") {
		t.Fatalf("Open under another key = %v, want a refusal naming the key", err)
	}
}

func TestConfigRefused(t *testing.T) {
	g := newTestGroup(t, 1)
	cfg := g.config("r0")
	cfg.ServerTLS, cfg.ClientTLS = nil, nil
	cfg.Peers = []Peer{{ID: "r0", Addr: "10.1.2.3:7000"}}
	if _, err := Open(cfg, &chain{}); err == nil || !strings.Contains(err.Error(), "only a loopback address") {
		t.Fatalf("plaintext on a non-loopback address: %v", err)
	}
	cfg = g.config("r0")
	cfg.ID = "r9"
	if _, err := Open(cfg, &chain{}); err == nil || !strings.Contains(err.Error(), "not one of its group's peers") {
		t.Fatalf("a replica not among its peers: %v", err)
	}
}

// TestMembership: a group of one grows to three replicas (each new one
// catching up from the log), then loses one and goes on.
func TestMembership(t *testing.T) {
	g := newTestGroup(t, 3)
	// Start over as a group of r0 alone; r1 and r2 join it later.
	g.closeAll()
	for _, p := range g.peers {
		os.RemoveAll(filepath.Join(g.root, p.ID))
	}
	all := g.peers
	g.peers = all[:1]
	g.start("r0")
	g.propose(entries("a", 10)...)
	g.members("r0", all[:1])
	g.peers = all
	for _, p := range all[1:] {
		g.startWith(p.ID, true) // not in r0's group yet: it waits to be added
	}
	// Joining replicas wait: they never elect a leader of their own.
	time.Sleep(5 * fastTiming.Election)
	for _, p := range all[1:] {
		if g.replicas[p.ID].IsLeader() {
			t.Fatalf("%s, joining, leads a group of its own", p.ID)
		}
	}
	for _, p := range all[1:] {
		if err := g.replicas["r0"].AddVoter(p); err != nil {
			t.Fatalf("AddVoter(%s): %v", p.ID, err)
		}
	}
	g.converged(10)
	g.members("r2", all)
	g.propose(entries("b", 5)...)
	g.converged(15)
	leader := g.leader()
	var leaving, staying []Peer
	for _, p := range all {
		if p.ID != leader && leaving == nil {
			leaving = append(leaving, p)
		} else {
			staying = append(staying, p)
		}
	}
	for _, p := range all {
		g.seesItselfMember(p.ID)
	}
	if err := g.replicas[leader].RemoveServer(leaving[0].ID); err != nil {
		t.Fatal(err)
	}
	g.members(leader, staying)
	select {
	case <-g.replicas[leaving[0].ID].Removed():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s, removed from its group, was not told", leaving[0].ID)
	}
	for _, p := range staying {
		select {
		case <-g.replicas[p.ID].Removed():
			t.Fatalf("%s reports itself removed, though it stays", p.ID)
		default:
		}
	}
	g.stop(leaving[0].ID)
	g.propose(entries("c", 5)...)
	g.converged(20)
}

// seesItselfMember waits until replica id's membership watch has seen it
// in its group, and requires that it has not reported a removal.
func (g *testGroup) seesItselfMember(id string) {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !g.replicas[id].member.Load() {
		if time.Now().After(deadline) {
			g.t.Fatalf("%s never saw itself in its group", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-g.replicas[id].Removed():
		g.t.Fatalf("%s reports itself removed while a member", id)
	default:
	}
}

// members requires replica id's configuration to be want.
func (g *testGroup) members(id string, want []Peer) {
	g.t.Helper()
	got, err := g.replicas[id].Members()
	if err != nil || !slices.Equal(got, want) {
		g.t.Fatalf("%s's members: %v, %v; want %v", id, got, err, want)
	}
}

// TestMetrics: a leader change and commits show in the replicas' metrics.
func TestMetrics(t *testing.T) {
	g := newTestGroup(t, 3)
	g.propose(entries("a", 5)...)
	old := g.leader()
	g.stop(old)
	g.propose(entries("b", 5)...)
	leader := g.leader()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(g.replicas[leader].Collector()); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		m := f.GetMetric()[0]
		if l := m.GetLabel(); len(l) != 1 || l[0].GetValue() != leader {
			t.Fatalf("%s labelled %v, want replica=%s", f.GetName(), l, leader)
		}
		switch {
		case m.GetHistogram() != nil:
			got[f.GetName()] = float64(m.GetHistogram().GetSampleCount())
		case m.GetCounter() != nil:
			got[f.GetName()] = m.GetCounter().GetValue()
		default:
			got[f.GetName()] = m.GetGauge().GetValue()
		}
	}
	if got["oblivkv_raft_is_leader"] != 1 || got["oblivkv_raft_term"] < 2 || got["oblivkv_raft_leader_changes_total"] < 2 ||
		got["oblivkv_raft_commit_seconds"] < 5 {
		t.Fatalf("the new leader's metrics: %v; want it leading in term 2 or later, 2 or more leader changes seen, its 5 commits timed", got)
	}
}
