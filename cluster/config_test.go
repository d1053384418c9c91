package cluster

import (
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
		"no replicas":       {`stash: [{replicas: [{id: s, rpc: "127.0.0.1:3", raft: "127.0.0.1:4"}]}]`, "stash: [{replicas: []}]", "stash[0] has no replicas"},
		"no routers":        {`routers: [{id: r, resp: "127.0.0.1:1", rpc: "127.0.0.1:2"}]`, "routers: []", "at least one router"},
		"negative capacity": {"protocol: treebeard}", "protocol: treebeard, capacity: -1}", "must be positive"},
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
