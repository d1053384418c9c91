// Package process runs one process of a treebeard cluster: a router, a
// replica of a Stash shard's group or a replica of an ORAM shard's group,
// as the cluster's configuration describes it.
//
// It owns a process's wiring: its store key and certificates, its raft
// group (cluster/raftgroup) and the following of its leadership
// (cluster/node), the layers' calls to the other processes (cluster/wire
// over cluster/rpc, mutual TLS unless Options.Plaintext), the server
// that answers theirs and the operator's membership requests
// (cluster/membership), its view of the configuration file, read again
// when it meets a replica added since it started (cluster.Live), and the
// HTTP server of its /metrics and /status
// (http.go). It never interprets a message, never decides what a leader
// does and never serves clients: a router's kv.Store is handed to the
// caller, which serves it over RESP.
package process

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/membership"
	"github.com/oblivkv/oblivkv/cluster/node"
	"github.com/oblivkv/oblivkv/cluster/raftgroup"
	"github.com/oblivkv/oblivkv/cluster/rpc"
	"github.com/oblivkv/oblivkv/cluster/wire"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/options"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

// Options are how a process runs, beyond its configuration.
type Options struct {
	// Plaintext runs the process's calls and raft without TLS: for
	// loopback only (raftgroup and the listeners refuse other addresses).
	Plaintext bool
	// Storage opens an ORAM shard's storage from its configuration's
	// storage field, with dataDir the process's data directory.
	Storage func(ctx context.Context, spec, dataDir string) (backend.Backend, error)
	// Log receives the process's events (nil: discarded).
	Log *slog.Logger
	// ConfigFile is the file the configuration was loaded from: the
	// process reads it again when it meets a process id it does not know
	// (a replica added to a group since it started; cluster.Live). ""
	// never reads it again.
	ConfigFile string
	// Join starts a replica added to a running group: with no raft state
	// it waits for the group's leader to add it (oblivkv cluster
	// add-voter) instead of bootstrapping the group from the
	// configuration (raftgroup.Config.Join).
	Join bool
	// TapFile, when set, receives what an ORAM replica's storage sees of
	// it (observe's adversary-view log), each call as it ends: the logs
	// of a group's replicas, merged by time (oblivkv tap merge), are what
	// the group's storage saw.
	TapFile string
}

// callTimeout bounds one attempt of a call to another process. A replica
// that stalls (paused, or its machine overloaded) keeps its connections
// open: its callers give up on it after this long and try the group's
// other replicas, one of which leads by then (an election takes 300-600
// ms, raftgroup.LANTiming). A call sent again is a copy its receiver
// answers once, so a slow reply costs a copy, never a second effect.
const callTimeout = 2 * time.Second

// Process is one running process of a cluster.
type Process struct {
	cfg   *cluster.Config // as the process started: its own group and shape never change
	live  *cluster.Live
	node  cluster.Node
	keys  *seal.Keys
	shape treebeard.Shape
	opts  Options
	net   *wire.Net

	group   *raftgroup.Group // a Stash or ORAM replica's
	server  *rpc.Server
	storage backend.Backend
	tap     *observe.FileLog
	router  kv.Store             // a router's: its RouterStore, with kv's checks
	stash   *treebeard.StashNode // a Stash replica's, for /status
	http    *http.Server         // nil without an http address
	stop    context.CancelFunc
	done    chan struct{}
}

// Start starts process id of cfg. A router's store is Router; a replica
// runs until Close.
func Start(ctx context.Context, cfg *cluster.Config, id string, o Options) (*Process, error) {
	n, ok := cfg.Node(id)
	if !ok {
		return nil, fmt.Errorf("cluster: no process %q in the configuration", id)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	p := &Process{cfg: cfg, live: cluster.NewLive(o.ConfigFile, cfg, o.Log), node: n, opts: o, done: make(chan struct{})}
	var err error
	if p.keys, err = cluster.ReadKeys(cfg); err != nil {
		return nil, err
	}
	if p.shape, err = ShapeOf(cfg); err != nil {
		return nil, err
	}
	clientTLS, err := p.clientTLS("")
	if err != nil {
		return nil, err
	}
	p.net = wire.NewNet(p.live, id, clientTLS, wire.WithTimeout(callTimeout))
	if err = p.start(ctx); err == nil {
		err = p.serveHTTP()
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// ShapeOf is the shape of the cluster's store: its options, with as many
// Stash and ORAM shards as the configuration has groups.
func ShapeOf(cfg *cluster.Config) (treebeard.Shape, error) {
	parsed, err := options.Parse("treebeard", options.Args(cfg.Store.Options))
	if err != nil {
		return treebeard.Shape{}, err
	}
	o, _ := parsed.(treebeard.Options)
	o.StashShards, o.ORAMShards, o.Routers = len(cfg.Stash), len(cfg.ORAM), 1
	return treebeard.NewShape(cfg.Store.Capacity, cfg.Store.ValueSize, o)
}

func (p *Process) start(ctx context.Context) error {
	switch p.node.Role {
	case "router":
		shards := make([]treebeard.StashShard, len(p.cfg.Stash))
		for i := range shards {
			shards[i] = treebeard.NewRemote(p.keys, p.net, treebeard.Endpoint{Layer: treebeard.LayerStash, Index: i})
		}
		r := treebeard.NewRouterStore(p.shape, p.keys, p.node.Shard, shards)
		st := r.Stats()
		p.router = kv.WithChecks(r, kv.Config{Protocol: st.Protocol, Capacity: st.Capacity, ValueSize: st.ValueSize, MaxKeySize: kv.DefaultMaxKeySize})
		close(p.done)
		return nil
	case "stash":
		return p.startStash(ctx)
	case "oram":
		return p.startORAM(ctx)
	}
	return fmt.Errorf("cluster: process %q has no role this build runs (%q)", p.node.ID, p.node.Role)
}

// startStash starts a replica of Stash shard p.node.Shard.
func (p *Process) startStash(ctx context.Context) error {
	trees := make([]treebeard.PathReader, p.shape.Trees())
	for t := range trees {
		trees[t] = treebeard.NewRemote(p.keys, p.net, treebeard.Endpoint{Layer: treebeard.LayerORAM, Index: t})
	}
	n, err := treebeard.NewStashNode(p.shape, p.node.Shard, trees)
	if err != nil {
		return err
	}
	p.stash = n
	recv := treebeard.NewReceiver(p.keys)
	recv.Serve(treebeard.Endpoint{Layer: treebeard.LayerStash, Index: p.node.Shard}, treebeard.Handlers{StashShard: n, EvictionSource: n, Admin: n})
	return p.run(ctx, p.cfg.Stash[p.node.Shard], n.Machine(), n, recv)
}

// startORAM starts a replica of ORAM shard p.node.Shard, on its storage.
func (p *Process) startORAM(ctx context.Context) error {
	g := p.cfg.ORAM[p.node.Shard]
	b, err := p.opts.Storage(ctx, g.Storage, p.cfg.DataDir(p.node.ID))
	if err != nil {
		return fmt.Errorf("cluster: ORAM shard %d's storage %q: %w", p.node.Shard, g.Storage, err)
	}
	p.storage = b
	if p.opts.TapFile != "" {
		if p.tap, err = observe.CreateFileLog(p.opts.TapFile); err != nil {
			return err
		}
		sink, err := p.tap.Flushed()
		if err != nil {
			return err
		}
		b = observe.NewTap(b, sink)
	}
	stashes := make([]treebeard.EvictionSource, len(p.cfg.Stash))
	for i := range stashes {
		stashes[i] = treebeard.NewRemote(p.keys, p.net, treebeard.Endpoint{Layer: treebeard.LayerStash, Index: i})
	}
	n, err := treebeard.NewORAMNode(p.shape, p.node.Shard, len(p.cfg.ORAM), b, p.keys, stashes)
	if err != nil {
		return err
	}
	recv := treebeard.NewReceiver(p.keys)
	for t := p.node.Shard; t < p.shape.Trees(); t += len(p.cfg.ORAM) {
		recv.Serve(treebeard.Endpoint{Layer: treebeard.LayerORAM, Index: t}, treebeard.Handlers{PathReader: n, Admin: n})
	}
	return p.run(ctx, g, n.Machine(), n, recv)
}

// run starts the replica's raft group over m, the server of its calls,
// and the following of its leadership by l.
func (p *Process) run(ctx context.Context, g cluster.Group, m raftgroup.Machine, l node.Leader, recv *treebeard.Receiver) error {
	rc, err := p.raftConfig(g)
	if err != nil {
		return err
	}
	if p.group, err = raftgroup.Open(rc, m); err != nil {
		return err
	}
	serverTLS, err := p.serverTLS()
	if err != nil {
		return err
	}
	leads := func(treebeard.Endpoint) (bool, string) {
		id, _ := p.group.Leader()
		return p.group.IsLeader(), id
	}
	h := membership.NewHandler(wire.NewHandler(p.live, recv, leads), p.node.ID, p.keys, p.group, p.live)
	p.server = rpc.NewServer(p.node.ID, serverTLS, h)
	ln, err := net.Listen("tcp", p.node.Addrs[0])
	if err != nil {
		return err
	}
	go p.server.Serve(ln)
	ctx, p.stop = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(p.done)
		node.Follow(ctx, p.group, l, p.opts.Log.With("group", fmt.Sprintf("%s-%d", p.node.Role, p.node.Shard)))
	}()
	return nil
}

// raftConfig is the replica's raft configuration in group g.
func (p *Process) raftConfig(g cluster.Group) (raftgroup.Config, error) {
	rc := raftgroup.Config{ID: p.node.ID, Dir: filepath.Join(p.cfg.DataDir(p.node.ID), "raft"), Keys: p.keys, Join: p.opts.Join}
	for _, r := range g.Replicas {
		rc.Peers = append(rc.Peers, raftgroup.Peer{ID: r.ID, Addr: r.Raft})
	}
	if p.opts.Plaintext {
		return rc, nil
	}
	var err error
	if rc.ServerTLS, err = p.serverTLS(); err != nil {
		return rc, err
	}
	rc.ClientTLS = func(addr string) (*tls.Config, error) {
		peer, ok := p.raftPeerAt(addr)
		if !ok {
			return nil, fmt.Errorf("cluster: no replica of %s-%d at %s in the configuration", p.node.Role, p.node.Shard, addr)
		}
		return p.clientTLS(peer)
	}
	return rc, nil
}

// raftPeerAt returns the id of the replica of the process's group whose
// raft address is addr, reading the configuration file again if the one
// in use has none there (a replica added since the process started).
func (p *Process) raftPeerAt(addr string) (string, bool) {
	return cluster.Find(p.live, func(c *cluster.Config) (string, bool) { return raftPeerIn(c, p.node.ID, addr) })
}

// raftPeerIn returns the id of the replica of self's group in cfg whose
// raft address is addr.
func raftPeerIn(cfg *cluster.Config, self, addr string) (string, bool) {
	_, g, _ := cfg.GroupOf(self)
	for _, r := range g.Replicas {
		if r.Raft == addr {
			return r.ID, true
		}
	}
	return "", false
}

func (p *Process) serverTLS() (*tls.Config, error) {
	if p.opts.Plaintext {
		return nil, nil
	}
	return cluster.ServerTLS(p.cfg.Certs, p.node.ID)
}

func (p *Process) clientTLS(peer string) (*tls.Config, error) {
	if p.opts.Plaintext {
		return nil, nil
	}
	return cluster.ClientTLS(p.cfg.Certs, p.node.ID, peer)
}

// Router is a router's store, nil for a replica.
func (p *Process) Router() kv.Store { return p.router }

// Group is a replica's raft group, nil for a router.
func (p *Process) Group() *raftgroup.Group { return p.group }

// Removed returns a channel closed once a replica has been removed from
// its group (raftgroup.Group.Removed); a router's never closes.
func (p *Process) Removed() <-chan struct{} {
	if p.group == nil {
		return nil
	}
	return p.group.Removed()
}

// Close stops the process: its http server, then a replica's term ends,
// then its server, its raft group and its storage.
func (p *Process) Close() error {
	var errs []error
	if p.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), httpGrace)
		errs = append(errs, p.http.Shutdown(ctx))
		cancel()
	}
	if p.stop != nil {
		p.stop()
		<-p.done
	}
	if p.router != nil {
		errs = append(errs, p.router.Close())
	}
	if p.server != nil {
		p.server.Stop()
	}
	if p.group != nil {
		errs = append(errs, p.group.Close())
	}
	if p.storage != nil {
		errs = append(errs, p.storage.Close())
	}
	if p.tap != nil {
		errs = append(errs, p.tap.Close())
	}
	if p.net != nil {
		errs = append(errs, p.net.Close())
	}
	return errors.Join(errs...)
}
