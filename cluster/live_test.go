package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// liveFile writes doc to a file and returns a Live of it that reloads
// at every call.
func liveFile(t *testing.T, doc string) (*Live, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLive(path, cfg, nil)
	l.every = 0
	return l, path
}

// rewrite replaces from by to in the file at path.
func rewrite(t *testing.T, path, from, to string) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	next := strings.Replace(string(doc), from, to, 1)
	if next == string(doc) {
		t.Fatalf("%q is not in %s", from, path)
	}
	if err := os.WriteFile(path, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLiveReloadsReplicas: a replica added to a group is taken; a file
// that changes the store, the routers, the number of groups or an ORAM
// group's storage, or that does not parse, is refused and the
// configuration in use kept.
func TestLiveReloadsReplicas(t *testing.T) {
	l, path := liveFile(t, minimal)
	rewrite(t, path, `raft: "127.0.0.1:4"}`, `raft: "127.0.0.1:4"}, {id: s2, rpc: "127.0.0.1:7", raft: "127.0.0.1:8"}`)
	cfg, err := l.Reload()
	if err != nil || len(cfg.Stash[0].Replicas) != 2 || l.Config() != cfg {
		t.Fatalf("Reload = %+v, %v; want stash[0] with s2", cfg, err)
	}
	if _, ok := cfg.Node("s2"); !ok {
		t.Fatal("the reloaded configuration has no s2")
	}
	for name, tc := range map[string]struct{ from, to, want string }{
		"store":        {"protocol: treebeard}", "protocol: treebeard, capacity: 99}", "changes store"},
		"routers":      {`id: r,`, `id: r9,`, "changes routers"},
		"stash groups": {`stash: [`, `stash: [{replicas: [{id: t, rpc: "127.0.0.1:9", raft: "127.0.0.1:10"}]}, `, "the number of stash groups"},
		"storage":      {"storage: disk", `storage: "redis://127.0.0.1:6400/0"`, "oram[0]'s storage"},
		"root":         {"store:", "root: elsewhere\nstore:", "root, certs or key"},
		"unparsable":   {"store:", "stor:", "field stor not found"},
	} {
		t.Run(name, func(t *testing.T) {
			before, _ := os.ReadFile(path)
			defer os.WriteFile(path, before, 0o600)
			rewrite(t, path, tc.from, tc.to)
			got, err := l.Reload()
			if err == nil || !strings.Contains(err.Error(), tc.want) || got != cfg || l.Config() != cfg {
				t.Fatalf("Reload = %v; want a refusal containing %q and the configuration in use kept", err, tc.want)
			}
		})
	}
}

// TestLiveReloadsAtMostEvery: a Live reads its file at most once per its
// period, and a Live with no file never does.
func TestLiveReloadsAtMostEvery(t *testing.T) {
	l, path := liveFile(t, minimal)
	l.every = time.Hour
	before := l.Config()
	if cfg, err := l.Reload(); err != nil || cfg == before {
		t.Fatalf("the first Reload = %p, %v; want the file read again", cfg, err)
	}
	read := l.Config()
	rewrite(t, path, `raft: "127.0.0.1:4"}`, `raft: "127.0.0.1:4"}, {id: s2, rpc: "127.0.0.1:7", raft: "127.0.0.1:8"}`)
	if cfg, _ := l.Reload(); cfg != read {
		t.Fatal("the file was read again within the period")
	}
	s2 := func(c *Config) (Replica, bool) { return c.Stash[0].Replica("s2") }
	if _, ok := Find(l, s2); ok {
		t.Fatal("Find read the file again within the period")
	}
	if r, ok := FindNow(l, s2); !ok || r.ID != "s2" {
		t.Fatalf("FindNow = %+v, %v; want s2, the file read at once", r, ok)
	}
	static := Static(before)
	if cfg, err := static.Reload(); cfg != before || err != nil {
		t.Fatalf("a static Live reloaded: %p, %v", cfg, err)
	}
}
