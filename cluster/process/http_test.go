package process

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/raftgroup/raftgrouptest"
)

// storageURL is the ORAM shard's storage in the test's configuration:
// what /status shows of it must leave out the password and the query.
const storageURL = "redis://user:secret@127.0.0.1:1/2?dial_timeout=1s"

// testCluster starts a router, a Stash replica and an ORAM replica (on
// memory, whatever its storage says), each serving http, in this test
// process, and returns them by id.
func testCluster(t *testing.T) (*cluster.Config, map[string]*Process) {
	t.Helper()
	a := func() string { return raftgrouptest.Addr(t) }
	doc := fmt.Sprintf(`
store: {protocol: treebeard, capacity: 256, value_size: 64}
root: %q
routers: [{id: router-0, resp: %q, rpc: %q, http: %q}]
stash: [{replicas: [{id: stash-0, rpc: %q, raft: %q, http: %q}]}]
oram: [{storage: %q, replicas: [{id: oram-0, rpc: %q, raft: %q, http: %q}]}]
`, t.TempDir(), a(), a(), a(), a(), a(), a(), storageURL, a(), a(), a())
	cfg, err := cluster.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Key = filepath.Join(cfg.Root, "key")
	if _, err := cluster.EnsureKey(cfg); err != nil {
		t.Fatal(err)
	}
	memory := mem.New()
	o := Options{Plaintext: true, Storage: func(context.Context, string, string) (backend.Backend, error) { return memory, nil }}
	procs := map[string]*Process{}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Close()
		}
	})
	for _, id := range []string{"oram-0", "stash-0", "router-0"} {
		p, err := Start(t.Context(), cfg, id, o)
		if err != nil {
			t.Fatal(err)
		}
		procs[id] = p
	}
	return cfg, procs
}

// get returns the body of http://addr/path.
func get(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %s, %v", addr, path, resp.Status, err)
	}
	return string(body)
}

// status returns process id's /status.
func status(t *testing.T, cfg *cluster.Config, id string) Status {
	t.Helper()
	n, _ := cfg.Node(id)
	var st Status
	if err := json.Unmarshal([]byte(get(t, n.HTTP, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestHTTPStatus: each process reports its role and raft's view of its
// group on /status, a Stash leader its stash's size, an ORAM replica its
// storage without its secrets, and a router no group.
func TestHTTPStatus(t *testing.T) {
	cfg, procs := testCluster(t)
	if err := procs["router-0"].Router().Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	stash := status(t, cfg, "stash-0")
	if stash.Role != "stash" || stash.State != "Leader" || stash.Leader != "stash-0" || !slices.Equal(stash.Members, []string{"stash-0"}) ||
		stash.Term == 0 || stash.CommitIndex == 0 || stash.AppliedIndex == 0 || stash.StashSize == nil || stash.Storage != "" {
		t.Errorf("stash-0's status: %+v; want the leader of a group of itself, with entries applied and a stash size", stash)
	}
	oram := status(t, cfg, "oram-0")
	if oram.Role != "oram" || oram.State != "Leader" || oram.StashSize != nil || oram.Storage != "redis://127.0.0.1:1/2" {
		t.Errorf("oram-0's status: %+v; want a leader with storage redis://127.0.0.1:1/2 and no stash", oram)
	}
	router := status(t, cfg, "router-0")
	if want := (Status{ID: "router-0", Role: "router"}); !statusEqual(router, want) {
		t.Errorf("router-0's status: %+v, want %+v", router, want)
	}
}

func statusEqual(a, b Status) bool {
	return a.ID == b.ID && a.Role == b.Role && a.Shard == b.Shard && a.State == b.State && a.Term == b.Term &&
		a.Leader == b.Leader && slices.Equal(a.Members, b.Members) && a.Storage == b.Storage && (a.StashSize == nil) == (b.StashSize == nil)
}

// TestHTTPMetrics: a replica's /metrics has its raft group's metrics,
// labelled with its id, beside the Go runtime's; a router's has no raft
// metrics. Each process has its registry: three in one test process
// register the same metrics without colliding.
func TestHTTPMetrics(t *testing.T) {
	cfg, _ := testCluster(t)
	for _, id := range []string{"stash-0", "oram-0"} {
		n, _ := cfg.Node(id)
		m := get(t, n.HTTP, "/metrics")
		for _, want := range []string{`oblivkv_raft_term{replica="` + id + `"}`, `oblivkv_raft_is_leader{replica="` + id + `"}`,
			`oblivkv_raft_apply_lag{replica="` + id + `"}`, `oblivkv_raft_leader_changes_total{replica="` + id + `"}`, "go_goroutines"} {
			if !strings.Contains(m, want) {
				t.Errorf("%s's /metrics has no %s", id, want)
			}
		}
	}
	n, _ := cfg.Node("router-0")
	if m := get(t, n.HTTP, "/metrics"); strings.Contains(m, "oblivkv_raft") || !strings.Contains(m, "go_goroutines") {
		t.Errorf("router-0's /metrics has raft metrics, or not the Go runtime's:\n%s", m)
	}
}

// TestHTTPClosed: a closed process no longer serves http.
func TestHTTPClosed(t *testing.T) {
	cfg, procs := testCluster(t)
	procs["stash-0"].Close()
	delete(procs, "stash-0")
	n, _ := cfg.Node("stash-0")
	c := http.Client{Timeout: time.Second}
	if resp, err := c.Get("http://" + n.HTTP + "/status"); err == nil {
		resp.Body.Close()
		t.Fatalf("a closed process answered /status: %s", resp.Status)
	}
}
