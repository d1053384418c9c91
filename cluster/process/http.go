package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// A process with an http address in the configuration serves, in plain
// HTTP, /metrics (Prometheus: its raft group's metrics, raftgroup's
// Collector, with the Go runtime's and the process's, on a registry of
// its own) and /status (Status as JSON). Both show only public facts
// about the cluster: never a key, a value, a position or a secret of the
// storage's URL. Even so, like serve's --metrics-addr, they are for the
// cluster's operators only.

// httpGrace bounds how long Close waits for the requests in progress.
const httpGrace = 2 * time.Second

// Status is what a process reports of itself on /status.
type Status struct {
	ID    string `json:"id"`
	Role  string `json:"role"`  // router, stash or oram
	Shard int    `json:"shard"` // its group's index; a router's, its index among the routers
	// State is the replica's raft state: Leader, Follower, Candidate or
	// Shutdown; "" for a router, which has no group.
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	LastSnapshot uint64 `json:"last_snapshot"` // the index of the replica's last snapshot, 0 if none
	// Leader is the id of the group's leader as the replica knows it; ""
	// when it knows none.
	Leader string `json:"leader"`
	// Members are the ids of the group's replicas in raft's latest
	// configuration (the configuration file's if raft cannot say); null
	// for a router.
	Members []string `json:"members"`
	// Storage is an ORAM replica's storage: "disk", or its URL without
	// user, password or query parameters.
	Storage string `json:"storage"`
	// StashSize is how many blocks a Stash shard's leader holds in its
	// stash; null on every other process.
	StashSize *int `json:"stash_size"`
}

// Status returns the process's status.
func (p *Process) Status() Status {
	st := Status{ID: p.node.ID, Role: p.node.Role, Shard: p.node.Shard}
	if p.group == nil {
		return st
	}
	gs := p.group.Status()
	st.State, st.Term, st.CommitIndex, st.AppliedIndex, st.LastSnapshot = gs.State, gs.Term, gs.CommitIndex, gs.AppliedIndex, gs.LastSnapshot
	st.Leader, _ = p.group.Leader()
	st.Members = p.members()
	if p.node.Role == "oram" {
		st.Storage = publicStorage(p.cfg.ORAM[p.node.Shard].Storage)
	}
	if p.stash != nil && p.group.IsLeader() {
		st.StashSize = p.stashSize()
	}
	return st
}

// members are the ids of the replica's group, from raft or else from the
// configuration.
func (p *Process) members() []string {
	var ids []string
	if peers, err := p.group.Members(); err == nil {
		for _, m := range peers {
			ids = append(ids, m.ID)
		}
		return ids
	}
	for _, r := range p.groupConfig().Replicas {
		ids = append(ids, r.ID)
	}
	return ids
}

// groupConfig is the replica's group in the configuration.
func (p *Process) groupConfig() cluster.Group {
	if p.node.Role == "stash" {
		return p.cfg.Stash[p.node.Shard]
	}
	return p.cfg.ORAM[p.node.Shard]
}

// stashSize asks the Stash shard's driver for its stash's size; nil if
// the replica stopped leading meanwhile.
func (p *Process) stashSize() *int {
	r := p.stash.Admin(treebeard.AdminMsg{Op: treebeard.AdminStats})
	if r.Code != treebeard.CodeOK {
		return nil
	}
	return &r.Stats.StashSize
}

// publicStorage is a storage spec without what may be secret: a URL's
// user, password and query parameters (file paths of TLS keys).
func publicStorage(spec string) string {
	u, err := url.Parse(spec)
	if err != nil || u.Scheme == "" {
		return spec
	}
	u.User, u.RawQuery = nil, ""
	return u.String()
}

// serveHTTP serves /metrics and /status on the process's http address,
// if it has one.
func (p *Process) serveHTTP() error {
	if p.node.HTTP == "" {
		return nil
	}
	ln, err := net.Listen("tcp", p.node.HTTP)
	if err != nil {
		return fmt.Errorf("cluster: http: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if p.group != nil {
		reg.MustRegister(p.group.Collector())
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(p.Status())
	})
	p.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := p.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			p.opts.Log.Error("http server stopped", "err", err)
		}
	}()
	return nil
}
