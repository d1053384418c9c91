package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExampleConfig(t *testing.T) {
	cfg, err := Load("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routers) != 2 || len(cfg.Stash) != 2 || len(cfg.ORAM) != 2 {
		t.Fatalf("example has %d routers, %d stash and %d oram groups, want 2 of each", len(cfg.Routers), len(cfg.Stash), len(cfg.ORAM))
	}
	if n := len(cfg.Nodes()); n != 2+6+6 {
		t.Fatalf("example has %d processes, want 14", n)
	}
	if got, want := cfg.DataDir("oram-1-c"), filepath.Join("cluster-data", "oram-1-c"); got != want {
		t.Fatalf("DataDir = %q, want %q", got, want)
	}
	if cfg.Certs != filepath.Join("cluster-data", "certs") {
		t.Fatalf("Certs = %q, want the default under root", cfg.Certs)
	}
	for _, n := range cfg.Nodes() {
		if n.HTTP == "" {
			t.Errorf("%s has no http address", n.ID)
		}
	}
	for i, g := range cfg.ORAM {
		addr, err := g.RedisServerAddr()
		if want := fmt.Sprintf("127.0.0.1:%d", 6400+i); !g.RedisServer || addr != want || err != nil {
			t.Errorf("oram[%d]: redis_server %v at %q, %v; want one at %s", i, g.RedisServer, addr, err, want)
		}
	}
}

// minimal is a valid one-process-per-layer configuration.
const minimal = `
store: {protocol: treebeard}
routers: [{id: r, resp: "127.0.0.1:1", rpc: "127.0.0.1:2"}]
stash: [{replicas: [{id: s, rpc: "127.0.0.1:3", raft: "127.0.0.1:4"}]}]
oram: [{storage: disk, replicas: [{id: o, rpc: "127.0.0.1:5", raft: "127.0.0.1:6"}]}]
`

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.Capacity != DefaultCapacity || cfg.Store.ValueSize != DefaultValueSize || cfg.Root != DefaultRoot {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ from, to, want string }{
		"unknown field":     {"store: {protocol: treebeard}", "store: {protocol: treebeard, shards: 2}", "field shards not found"},
		"other protocol":    {"protocol: treebeard", "protocol: waffle", "treebeard is the protocol"},
		"duplicate id":      {"id: o,", "id: s,", `process id "s" is used twice`},
		"bad id":            {"id: r,", "id: R_1,", `process id "R_1"`},
		"duplicate addr":    {`"127.0.0.1:6"`, `"127.0.0.1:5"`, "both listen on 127.0.0.1:5"},
		"missing addr":      {`, raft: "127.0.0.1:4"`, "", `address ""`},
		"no storage":        {"storage: disk, ", "", "names no storage"},
		"bad storage":       {"storage: disk", "storage: s3://bucket", "want \"disk\" or a redis://"},
		"stash storage":     {"stash: [{replicas", "stash: [{storage: disk, replicas", "only oram groups own storage"},
		"disk replicas":     {`raft: "127.0.0.1:6"}]`, `raft: "127.0.0.1:6"}, {id: o2, rpc: "127.0.0.1:7", raft: "127.0.0.1:8"}]`, "which only one process can open"},
		"no replicas":       {`stash: [{replicas: [{id: s, rpc: "127.0.0.1:3", raft: "127.0.0.1:4"}]}]`, "stash: [{replicas: []}]", "stash[0] has no replicas"},
		"no routers":        {`routers: [{id: r, resp: "127.0.0.1:1", rpc: "127.0.0.1:2"}]`, "routers: []", "at least one router"},
		"negative capacity": {"protocol: treebeard}", "protocol: treebeard, capacity: -1}", "must be positive"},
		"bad http":          {`rpc: "127.0.0.1:2"}`, `rpc: "127.0.0.1:2", http: "nowhere"}`, `address "nowhere"`},
		"duplicate http":    {`raft: "127.0.0.1:4"}`, `raft: "127.0.0.1:4", http: "127.0.0.1:1"}`, "r and s both listen on 127.0.0.1:1"},
		"redis_server disk": {"storage: disk,", "storage: disk, redis_server: true,", "oram[0].redis_server: storage \"disk\": want a redis:// URL"},
		"redis_server tls":  {"storage: disk,", `storage: "rediss://127.0.0.1:9/0", redis_server: true,`, "want a redis:// URL"},
		"redis_server far":  {"storage: disk,", `storage: "redis://10.0.0.1:6379/0", redis_server: true,`, "listens on loopback only"},
		"redis_server user": {"storage: disk,", `storage: "redis://:pw@127.0.0.1:6379/0", redis_server: true,`, "no user or password"},
		"redis_server port": {"storage: disk,", `storage: "redis://127.0.0.1:5/0", redis_server: true,`, "the redis-server of oram[0] and o both listen on 127.0.0.1:5"},
		"stash redis":       {"stash: [{replicas", "stash: [{redis_server: true, replicas", "stash[0].redis_server: only oram groups"},
		"admin id":          {"id: s,", "id: admin,", `process id "admin" is reserved`},
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(minimal, tc.from, tc.to, 1)
			if doc == minimal {
				t.Fatalf("%q is not in the configuration", tc.from)
			}
			_, err := Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestParseOptionalFields: http addresses and redis_server are read, and
// a redis-server's address defaults as a redis:// URL's does.
func TestParseOptionalFields(t *testing.T) {
	doc := strings.NewReplacer(`rpc: "127.0.0.1:2"}`, `rpc: "127.0.0.1:2", http: "127.0.0.1:7"}`,
		"storage: disk,", `storage: "redis://localhost/1", redis_server: true,`).Replace(minimal)
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := cfg.Node("r"); r.HTTP != "127.0.0.1:7" {
		t.Errorf("router r serves http on %q, want 127.0.0.1:7", r.HTTP)
	}
	if s, _ := cfg.Node("s"); s.HTTP != "" {
		t.Errorf("replica s serves http on %q, want nowhere", s.HTTP)
	}
	if addr, err := cfg.ORAM[0].RedisServerAddr(); !cfg.ORAM[0].RedisServer || addr != "127.0.0.1:6379" || err != nil {
		t.Errorf("oram[0]: redis_server %v at %q, %v; want one at 127.0.0.1:6379", cfg.ORAM[0].RedisServer, addr, err)
	}
}

func TestLoadResolvesDirectories(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(minimal+"root: data\ncerts: /etc/oblivkv/certs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Root != filepath.Join(dir, "data") || cfg.Certs != "/etc/oblivkv/certs" {
		t.Fatalf("Root, Certs = %q, %q; want the root beside the file and the absolute certs kept", cfg.Root, cfg.Certs)
	}
}
