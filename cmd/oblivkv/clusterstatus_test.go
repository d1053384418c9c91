package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/cluster/process"
)

// fakeProcess serves st on /status, as a process of a cluster would.
func fakeProcess(t *testing.T, st process.Status) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestClusterStatus: cluster status shows each group's leader (the
// replica that says so), the replicas that answer and those that do not,
// a process that answers as another as down, and one with no http
// address as not asked; --json says the same.
func TestClusterStatus(t *testing.T) {
	stash := 7
	members := []string{"s-a", "s-b", "s-c"}
	httpAt := map[string]string{
		"r0":  fakeProcess(t, process.Status{ID: "r0", Role: "router"}),
		"s-a": fakeProcess(t, process.Status{ID: "s-a", Role: "stash", State: "Leader", Term: 3, CommitIndex: 40, AppliedIndex: 40, Leader: "s-a", Members: members, StashSize: &stash}),
		"s-b": fakeProcess(t, process.Status{ID: "s-b", Role: "stash", State: "Follower", Term: 3, CommitIndex: 40, AppliedIndex: 39, LastSnapshot: 12, Leader: "s-a", Members: members}),
		"s-c": freeAddr(t),
		"o-a": fakeProcess(t, process.Status{ID: "o-a", Role: "oram", State: "Leader", Term: 2, Leader: "o-a", Members: []string{"o-a", "o-b"}, Storage: "redis://127.0.0.1:6400/0"}),
	}
	httpAt["o-b"] = fakeProcess(t, process.Status{ID: "o-a", Role: "oram"}) // a process that answers as another
	config := filepath.Join(t.TempDir(), "cluster.yaml")
	port := 0
	addr := func() string { port++; return fmt.Sprintf("127.0.0.1:%d", port) }
	replica := func(id string) string {
		return fmt.Sprintf("{id: %s, rpc: %q, raft: %q, http: %q}", id, addr(), addr(), httpAt[id])
	}
	doc := fmt.Sprintf(`store: {protocol: treebeard}
routers: [{id: r0, resp: %q, rpc: %q, http: %q}, {id: r1, resp: %q, rpc: %q}]
stash: [{replicas: [%s, %s, %s]}]
oram: [{storage: "redis://127.0.0.1:6400/0", replicas: [%s, {id: o-b, rpc: %q, raft: %q, http: %q}]}]
`, addr(), addr(), httpAt["r0"], addr(), addr(), replica("s-a"), replica("s-b"), replica("s-c"), replica("o-a"), addr(), addr(), httpAt["o-b"])
	if err := os.WriteFile(config, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := runRootCmd(t, "cluster", "status", "--config", config)
	if err != nil {
		t.Fatalf("cluster status: %v\n%s", err, out)
	}
	for _, want := range []string{
		`stash 0: leader s-a, members s-a,s-b,s-c\n`,
		`s-a +Leader +3 +40 +40 +0 +7\n`,
		`s-b +Follower +3 +40 +39 +12 +-\n`,
		`s-c +down`,
		`oram 0: leader o-a, members o-a,o-b\n`,
		`o-a +Leader +2 +0 +0 +0 +redis://127\.0\.0\.1:6400/0\n`,
		`o-b +down`,
		`r0 +up\n`,
		`r1 +unknown \(no http address\)\n`,
	} {
		if !regexp.MustCompile(`(?m)^ *` + want).MatchString(out) {
			t.Errorf("cluster status shows no line %q:\n%s", want, out)
		}
	}

	out, err = runRootCmd(t, "cluster", "status", "--config", config, "--json")
	if err != nil {
		t.Fatalf("cluster status --json: %v\n%s", err, out)
	}
	var r clusterReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if s := r.Stash[0]; s.Leader != "s-a" || !s.Replicas[1].Up || s.Replicas[1].AppliedIndex != 39 || s.Replicas[2].Up || s.Replicas[2].Error == "" {
		t.Errorf("--json's stash group: %+v", s)
	}
	if o := r.ORAM[0]; o.Leader != "o-a" || o.Replicas[1].Up || !strings.Contains(o.Replicas[1].Error, `answers as process "o-a"`) {
		t.Errorf("--json's oram group: %+v", o)
	}
	if len(r.Routers) != 2 || !r.Routers[0].Up || r.Routers[1].Up {
		t.Errorf("--json's routers: %+v", r.Routers)
	}
}
