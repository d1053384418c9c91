// Package raftgroup replicates one deterministic machine over a group of
// processes with hashicorp/raft: each replica applies the same entries in
// the same order, so each reaches the same state and computes the same
// outputs, and a new leader takes over from the log and the last snapshot.
//
// It owns a replica's raft node: its log and stable store (pebble, in the
// replica's data directory, entries sealed under the store key: the log
// store is written here because raft-boltdb/v2's current release does not
// build against raft v1.8.0 and its previous one compiles in the
// unmaintained boltdb/bolt; docs/dependencies.md), its snapshots (sealed
// before they reach disk), and its transport (raft's network transport
// over mutual TLS). It never interprets an entry or a snapshot, never
// talks to storage and never decides what a leader does with outputs:
// that is the driver's, which proposes entries and, on the leader, acts
// on what applying them returned.
package raftgroup

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oblivkv/oblivkv/seal"
)

// Machine is what a group replicates. Apply must be deterministic: the
// same entries applied to the same snapshot give the same state and the
// same outputs on every replica. Raft calls Apply, Snapshot and Restore
// from one goroutine.
type Machine interface {
	// Apply applies one committed entry and returns its outputs (handed to
	// the proposer on the replica that proposed it) or an error (the same
	// on every replica).
	Apply(entry []byte) (any, error)
	// Snapshot returns the whole state.
	Snapshot() ([]byte, error)
	// Restore replaces the state by a snapshot.
	Restore(snapshot []byte) error
}

// Peer is one replica of a group.
type Peer struct {
	ID   string
	Addr string // HOST:PORT of its raft transport
}

// Config describes one replica. Zero durations take Timing's LAN values.
type Config struct {
	ID    string // this replica's id, one of Peers
	Peers []Peer // the group's replicas when it is first created
	Dir   string // the replica's raft directory: log/ (pebble) and snapshots/
	Keys  *seal.Keys
	// ServerTLS and ClientTLS make the transport mutual TLS: ClientTLS
	// returns the configuration that dials the replica at an address.
	// Both nil: plaintext, allowed only when this replica listens on a
	// loopback address.
	ServerTLS *tls.Config
	ClientTLS func(addr string) (*tls.Config, error)
	Timing    Timing
	// Join starts a replica that is being added to a running group
	// (AddVoter on its leader): with no state it waits for the leader
	// rather than bootstrap a group of its own from Peers, which could
	// elect a second leader among the new replicas.
	Join bool
}

// Timing are the group's raft timeouts.
type Timing struct {
	Heartbeat, Election, LeaderLease, Commit time.Duration
	// SnapshotEvery is how many entries raft applies between snapshots;
	// TrailingLogs how many it keeps after one (for followers behind).
	SnapshotEvery, TrailingLogs uint64
}

// LANTiming are timeouts for replicas on one LAN (sub-millisecond round
// trips): a leader's loss is noticed in 300-600 ms (raft's defaults are
// 1 s, for WANs). On a loaded machine where a process may stall for
// hundreds of milliseconds, raise them rather than have leaders flap.
var LANTiming = Timing{
	Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond,
	LeaderLease: 150 * time.Millisecond, Commit: 10 * time.Millisecond,
	SnapshotEvery: 8192, TrailingLogs: 10240,
}

// logCacheEntries is how many of the latest entries a replica keeps in
// memory (raft.LogCache) besides its log store: the leader reads each
// entry back to send it to its followers, and every replica reads it back
// to apply it, and from the cache neither costs a pebble read and an
// unseal. A CPU profile of a loaded 3-replica cluster put those reads at
// 4-6% of each replica's CPU.
const logCacheEntries = 1024

// Group is one running replica.
type Group struct {
	raft      *raft.Raft
	logs      *logStore
	transport *raft.NetworkTransport
	metrics   *metrics

	member    atomic.Bool   // watchMembership saw this replica in its group
	removed   chan struct{} // closed by Leave
	leaveOnce sync.Once
	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	watched   chan struct{} // closed when watchMembership returns
}

// Open starts the replica cfg describes, applying its log to m. A replica
// with no state yet bootstraps the group from cfg.Peers (every replica of
// a new group may do so with the same peers), unless it joins a running
// one (cfg.Join).
func Open(cfg Config, m Machine) (*Group, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	logs, err := openLogStore(filepath.Join(cfg.Dir, "log"), cfg.Keys)
	if err != nil {
		return nil, err
	}
	if err := logs.checkKey(); err != nil {
		logs.Close()
		return nil, err
	}
	g, err := start(cfg, m, logs)
	if err != nil {
		logs.Close()
		return nil, err
	}
	return g, nil
}

// check refuses a configuration that cannot run.
func (cfg *Config) check() error {
	self := false
	for _, p := range cfg.Peers {
		self = self || p.ID == cfg.ID
	}
	switch {
	case cfg.ID == "" || !self:
		return fmt.Errorf("raftgroup: replica %q is not one of its group's peers", cfg.ID)
	case cfg.Keys == nil || cfg.Dir == "":
		return errors.New("raftgroup: a replica needs a directory and the store's keys")
	case (cfg.ServerTLS == nil) != (cfg.ClientTLS == nil):
		return errors.New("raftgroup: give both ServerTLS and ClientTLS, or neither")
	case cfg.ServerTLS == nil && !loopback(cfg.addr()):
		return fmt.Errorf("raftgroup: plaintext raft on %s: only a loopback address may go without TLS", cfg.addr())
	}
	return nil
}

// addr is this replica's address.
func (cfg *Config) addr() string {
	for _, p := range cfg.Peers {
		if p.ID == cfg.ID {
			return p.Addr
		}
	}
	return ""
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// checkKey opens the last entry, so that a replica started with another
// store's key is refused with a clear error before raft runs.
func (s *logStore) checkKey() error {
	last, _ := s.LastIndex()
	if last == 0 {
		return nil
	}
	var l raft.Log
	return s.GetLog(last, &l)
}

// start runs raft over the log store.
func start(cfg Config, m Machine, logs *logStore) (*Group, error) {
	logger := hclog.NewNullLogger()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, logger)
	if err != nil {
		return nil, fmt.Errorf("raftgroup: snapshots in %s: %w", cfg.Dir, err)
	}
	stream, err := listen(cfg)
	if err != nil {
		return nil, err
	}
	transport := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 4, Timeout: 10 * time.Second, Logger: logger,
	})
	rc := raftConfig(cfg, logger)
	fsm := &machineFSM{m: m, keys: cfg.Keys}
	if err := bootstrap(cfg, rc, logs, snaps, transport); err != nil {
		transport.Close()
		return nil, err
	}
	cached, err := raft.NewLogCache(logCacheEntries, logs)
	if err != nil {
		transport.Close()
		return nil, fmt.Errorf("raftgroup: %w", err)
	}
	r, err := raft.NewRaft(rc, fsm, cached, logs, snaps, transport)
	if err != nil {
		transport.Close()
		return nil, fmt.Errorf("raftgroup: starting %s: %w", cfg.ID, err)
	}
	g := &Group{raft: r, logs: logs, transport: transport, metrics: newMetrics(r, prometheus.Labels{"replica": cfg.ID}),
		removed: make(chan struct{}), closing: make(chan struct{}), watched: make(chan struct{})}
	go g.watchMembership(rc.LocalID, rc.HeartbeatTimeout)
	return g, nil
}

// watchMembership closes g.removed once this replica, having been seen in
// its group's latest configuration, is no longer in it, or its raft
// stopped without Close (raft stops a leader that removed itself). It
// looks every interval. A replica starts counting as a member only once
// it has seen itself in the configuration: one that joins may first see
// configurations from before it was added, while it catches up.
func (g *Group) watchMembership(id raft.ServerID, interval time.Duration) {
	defer close(g.watched)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-g.closing:
			return
		case <-tick.C:
		}
		f := g.raft.GetConfiguration()
		err := f.Error()
		if err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
			continue
		}
		in := err == nil && slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == id })
		if in {
			g.member.Store(true)
			continue
		}
		if !g.member.Load() {
			continue
		}
		select {
		case <-g.closing: // raft stopped by Close
		default:
			g.Leave()
		}
		return
	}
}

// Leave closes Removed, once: watchMembership calls it when the replica
// sees its removal, and the operator, having removed the replica, when
// the replica may never see it (membership.Admin.Remove). A leader that
// removed itself and lost its leadership before the change committed
// can have the entry overwritten by its successor's log; the successor,
// once it has removed the replica, replicates to it once more at most,
// on a best effort, and one failed call leaves the replica with a
// configuration that still holds it.
func (g *Group) Leave() { g.leaveOnce.Do(func() { close(g.removed) }) }

// Removed returns a channel closed once this replica has been removed
// from its group (RemoveServer committed, or Leave), or its raft stopped
// on its own: it takes no part in the group any more, and its process
// should stop. A replica removed while it was down, or added and removed
// within one heartbeat, is not told.
func (g *Group) Removed() <-chan struct{} { return g.removed }

// raftConfig is raft's configuration for cfg.
func raftConfig(cfg Config, logger hclog.Logger) *raft.Config {
	t := cfg.Timing.withDefaults()
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout, rc.ElectionTimeout = t.Heartbeat, t.Election
	rc.LeaderLeaseTimeout, rc.CommitTimeout = t.LeaderLease, t.Commit
	rc.SnapshotThreshold, rc.TrailingLogs = t.SnapshotEvery, t.TrailingLogs
	rc.Logger = logger
	return rc
}

// withDefaults fills zero fields from LANTiming.
func (t Timing) withDefaults() Timing {
	d := LANTiming
	for _, f := range []struct{ v, def *time.Duration }{{&t.Heartbeat, &d.Heartbeat}, {&t.Election, &d.Election},
		{&t.LeaderLease, &d.LeaderLease}, {&t.Commit, &d.Commit}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if t.SnapshotEvery == 0 {
		t.SnapshotEvery = d.SnapshotEvery
	}
	if t.TrailingLogs == 0 {
		t.TrailingLogs = d.TrailingLogs
	}
	return t
}

// bootstrap makes a replica with no state a member of cfg.Peers, unless
// it joins a running group.
func bootstrap(cfg Config, rc *raft.Config, logs *logStore, snaps raft.SnapshotStore, t raft.Transport) error {
	has, err := raft.HasExistingState(logs, logs, snaps)
	if err != nil || has || cfg.Join {
		return err
	}
	var servers []raft.Server
	for _, p := range cfg.Peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	return raft.BootstrapCluster(rc, logs, logs, snaps, t, raft.Configuration{Servers: servers})
}

// ErrNotLeader is the error of Propose on a replica that does not lead.
var ErrNotLeader = errors.New("raftgroup: not the leader")

// Propose appends entry to the group's log and, once it is committed and
// applied here, returns what the machine's Apply returned. Only the
// leader proposes: elsewhere it fails with ErrNotLeader, naming the
// leader if known. An error after the entry was sent (the leader lost
// leadership, the context ended) leaves its outcome unknown: it may
// still be committed.
func (g *Group) Propose(ctx context.Context, entry []byte) (any, error) {
	start := time.Now()
	f := g.raft.Apply(entry, timeoutOf(ctx))
	if err := g.failed("propose", g.wait(ctx, f)); err != nil {
		return nil, err
	}
	g.metrics.commit.Observe(time.Since(start).Seconds())
	res := f.Response().(applied)
	return res.out, res.err
}

// wait returns f's error once raft answers, or an error once ctx ends or
// the replica closes. Raft leaves unanswered an entry it committed but had
// not applied when it shut down, so a proposer waiting on raft alone
// would wait forever. Raft's future offers no channel, so each proposal
// waits on it in a goroutine of its own; for an entry raft never
// answers, that goroutine stays until the process ends.
func (g *Group) wait(ctx context.Context, f raft.ApplyFuture) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-g.closing:
		return raft.ErrRaftShutdown
	}
}

// Leader returns the id and address of the group's leader as this replica
// knows it; empty when there is none.
func (g *Group) Leader() (id, addr string) {
	a, i := g.raft.LeaderWithID()
	return string(i), string(a)
}

// IsLeader reports whether this replica leads.
func (g *Group) IsLeader() bool { return g.raft.State() == raft.Leader }

// Barrier waits until this replica, which must lead, has applied every
// entry committed before the call: what a new leader does before it
// reads its machine's state to take over (a leader elected may not have
// applied all the entries its predecessor committed).
func (g *Group) Barrier(ctx context.Context) error {
	return g.failed("barrier", g.raft.Barrier(timeoutOf(ctx)).Error())
}

// timeoutOf is the time left before ctx's deadline, 0 (none) without one.
func timeoutOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return 0
}

// failed returns raft's error err of the call what: ErrNotLeader, naming
// the leader if known, when this replica does not lead or stopped
// leading.
func (g *Group) failed(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost):
		_, id := g.raft.LeaderWithID()
		return fmt.Errorf("%w (leader: %q): %v", ErrNotLeader, id, err)
	}
	return fmt.Errorf("raftgroup: %s: %w", what, err)
}

// LeaderCh delivers true when this replica becomes leader and false when
// it stops leading.
func (g *Group) LeaderCh() <-chan bool { return g.raft.LeaderCh() }

// Status is what a replica reports of its group.
type Status struct {
	State       string // Leader, Follower, Candidate or Shutdown
	Term        uint64
	CommitIndex uint64
	// AppliedIndex is the last entry raft handed the machine, which may
	// not have applied it yet: a leader that reads its machine to take
	// over waits with Barrier.
	AppliedIndex uint64
	LastSnapshot uint64 // the index of the last snapshot, 0 if none
}

// Status returns this replica's view of its group.
func (g *Group) Status() Status {
	last, _ := strconv.ParseUint(g.raft.Stats()["last_snapshot_index"], 10, 64) // raft says it only there
	return Status{State: g.raft.State().String(), Term: g.raft.CurrentTerm(), CommitIndex: g.raft.CommitIndex(),
		AppliedIndex: g.raft.AppliedIndex(), LastSnapshot: last}
}

// Snapshot takes a snapshot now (raft takes them on its own every
// Timing.SnapshotEvery entries).
func (g *Group) Snapshot() error { return g.raft.Snapshot().Error() }

// AddVoter adds a replica to the group and returns once the change is
// committed; only the leader can (elsewhere: ErrNotLeader).
func (g *Group) AddVoter(p Peer) error {
	return g.failed("add voter", g.raft.AddVoter(raft.ServerID(p.ID), raft.ServerAddress(p.Addr), 0, 0).Error())
}

// Members returns the group's replicas in raft's latest configuration
// as this replica knows it: the Peers it was created with, as changed
// since by AddVoter and RemoveServer.
func (g *Group) Members() ([]Peer, error) {
	f := g.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raftgroup: members: %w", err)
	}
	var peers []Peer
	for _, s := range f.Configuration().Servers {
		peers = append(peers, Peer{ID: string(s.ID), Addr: string(s.Address)})
	}
	return peers, nil
}

// RemoveServer removes a replica from the group and returns once the
// change is committed; only the leader can (elsewhere: ErrNotLeader). A
// leader that removes itself steps down once the change is committed.
func (g *Group) RemoveServer(id string) error {
	return g.failed("remove server", g.raft.RemoveServer(raft.ServerID(id), 0, 0).Error())
}

// Close stops the replica: raft, its transport and its log store.
func (g *Group) Close() error {
	g.closeOnce.Do(func() { close(g.closing) })
	<-g.watched
	err := g.raft.Shutdown().Error()
	g.metrics.stop(g.raft)
	return errors.Join(err, g.transport.Close(), g.logs.Close())
}

// applied is what the FSM hands back to Propose.
type applied struct {
	out any
	err error
}

// machineFSM is raft's FSM over a Machine, its snapshots sealed.
type machineFSM struct {
	m    Machine
	keys *seal.Keys
}

// snapshotAD binds a sealed snapshot to its purpose.
var snapshotAD = []byte("oblivkv raft snapshot")

func (f *machineFSM) Apply(l *raft.Log) any {
	out, err := f.m.Apply(l.Data)
	return applied{out: out, err: err}
}

func (f *machineFSM) Snapshot() (raft.FSMSnapshot, error) {
	state, err := f.m.Snapshot()
	if err != nil {
		return nil, err
	}
	return sealedSnapshot(f.keys.Seal(nil, snapshotAD, state)), nil
}

func (f *machineFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	sealed, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	state, err := f.keys.Open(nil, snapshotAD, sealed)
	if err != nil {
		return fmt.Errorf("raftgroup: a snapshot does not open under this store's key: %w", err)
	}
	return f.m.Restore(state)
}

// sealedSnapshot is a snapshot as raft persists it.
type sealedSnapshot []byte

func (s sealedSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := io.Copy(sink, bytes.NewReader(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s sealedSnapshot) Release() {}
