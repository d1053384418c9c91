// Package cluster describes a treebeard cluster: the processes it runs
// (stateless routers, Stash shard groups and ORAM shard groups of
// replicas), where each listens, where each keeps its data, which storage
// each ORAM shard owns, and the certificates the processes prove
// themselves to each other with.
//
// It owns the cluster configuration file (YAML, read strictly: an unknown
// field is an error, not a silent default), a running process's view of
// it, read again when groups' replicas change (Live, live.go), and the
// cluster's certificate authority with the operator's certificate
// (certs.go). It never starts a process, opens storage or holds
// a store key: the key is the store's, in each process's data directory.
//
// The layers are Treebeard's (Treebeard Sec. 4): routers take client
// requests, Stash shards hold the blocks of recent requests, ORAM shards
// own the storage trees. Each Stash and ORAM shard is a group of replicas
// (Treebeard Sec. 7.2); a group of one is allowed.
package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is a cluster's configuration file.
type Config struct {
	// Store shapes the store the cluster serves; fixed once created.
	Store Store `yaml:"store"`
	// Root holds each process's data directory, Root/ID. Relative to the
	// configuration file's directory; default "cluster-data".
	Root string `yaml:"root"`
	// Certs is the directory of the cluster's CA and certificates
	// (`oblivkv cluster certs`). Relative to the configuration file's
	// directory; default Root/certs.
	Certs string `yaml:"certs"`
	// Key is the store's master key file, which every process reads
	// (`oblivkv cluster certs` writes it when missing). Relative to the
	// configuration file's directory; default Root/key.
	Key string `yaml:"key"`
	// Routers are the processes RESP clients connect to.
	Routers []Router `yaml:"routers"`
	// Stash lists the Stash shards, shard i the i-th group.
	Stash []Group `yaml:"stash"`
	// ORAM lists the ORAM shards, shard i the i-th group.
	ORAM []Group `yaml:"oram"`
}

// Store shapes the cluster's store.
type Store struct {
	Protocol  string            `yaml:"protocol"`   // "treebeard", the one protocol that runs as a cluster
	Capacity  int               `yaml:"capacity"`   // keys; default 65536
	ValueSize int               `yaml:"value_size"` // bytes; default 1024
	Options   map[string]string `yaml:"options"`    // the protocol's options, as serve --opt NAME=VALUE
}

// Router is one router process.
type Router struct {
	ID   string `yaml:"id"`
	RESP string `yaml:"resp"` // HOST:PORT for RESP clients
	RPC  string `yaml:"rpc"`  // HOST:PORT for the cluster's own calls
	HTTP string `yaml:"http"` // optional HOST:PORT for /metrics and /status
}

// Group is one Stash or ORAM shard: its replicas and, for an ORAM shard,
// the storage its trees live on.
type Group struct {
	// Storage is an ORAM shard's backend: "disk" (in each replica's data
	// directory: only the leader writes, so a new leader reads what the
	// old one wrote only on shared storage) or a redis:// or rediss://
	// URL. Stash shards have none.
	Storage string `yaml:"storage"`
	// RedisServer has `oblivkv cluster up` start a redis-server for
	// Storage, which must then be a redis:// URL on loopback.
	RedisServer bool      `yaml:"redis_server"`
	Replicas    []Replica `yaml:"replicas"`
}

// Replica is one process of a group.
type Replica struct {
	ID   string `yaml:"id"`
	RPC  string `yaml:"rpc"`  // HOST:PORT for the layers' calls
	Raft string `yaml:"raft"` // HOST:PORT for the group's consensus
	HTTP string `yaml:"http"` // optional HOST:PORT for /metrics and /status
}

// Defaults of a Config's optional fields.
const (
	DefaultRoot      = "cluster-data"
	DefaultCapacity  = 1 << 16
	DefaultValueSize = 1024
	certsDir         = "certs"
)

// Load reads and checks the configuration file at path; relative
// directories in it become relative to path's directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("cluster config %s: %w", path, err)
	}
	cfg.resolve(filepath.Dir(path))
	return cfg, nil
}

// Parse reads and checks a configuration, applying defaults; directories
// stay as written.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return nil, err
	}
	cfg.defaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// defaults fills the optional fields.
func (c *Config) defaults() {
	if c.Root == "" {
		c.Root = DefaultRoot
	}
	if c.Certs == "" {
		c.Certs = filepath.Join(c.Root, certsDir)
	}
	if c.Key == "" {
		c.Key = filepath.Join(c.Root, "key")
	}
	if c.Store.Capacity == 0 {
		c.Store.Capacity = DefaultCapacity
	}
	if c.Store.ValueSize == 0 {
		c.Store.ValueSize = DefaultValueSize
	}
}

// resolve makes Root, Certs and Key relative to dir.
func (c *Config) resolve(dir string) {
	for _, p := range []*string{&c.Root, &c.Certs, &c.Key} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// DataDir is the data directory of the process id.
func (c *Config) DataDir(id string) string { return filepath.Join(c.Root, id) }

// check reports every problem of a defaulted configuration at once.
func (c *Config) check() error {
	var errs []error
	if c.Store.Protocol != "treebeard" {
		errs = append(errs, fmt.Errorf("store.protocol is %q: treebeard is the protocol that runs as a cluster", c.Store.Protocol))
	}
	if c.Store.Capacity < 0 || c.Store.ValueSize < 0 {
		errs = append(errs, errors.New("store.capacity and store.value_size must be positive"))
	}
	if len(c.Routers) == 0 || len(c.Stash) == 0 || len(c.ORAM) == 0 {
		errs = append(errs, errors.New("a cluster needs at least one router, one stash group and one oram group"))
	}
	errs = append(errs, c.checkGroups("stash", c.Stash, false)...)
	errs = append(errs, c.checkGroups("oram", c.ORAM, true)...)
	errs = append(errs, c.checkNodes()...)
	return errors.Join(errs...)
}

// checkGroups checks the shape of each group of one layer.
func (c *Config) checkGroups(layer string, groups []Group, storage bool) []error {
	var errs []error
	for i, g := range groups {
		if len(g.Replicas) == 0 {
			errs = append(errs, fmt.Errorf("%s[%d] has no replicas", layer, i))
		}
		switch {
		case storage && g.Storage == "":
			errs = append(errs, fmt.Errorf("%s[%d] names no storage: \"disk\" or a redis:// URL", layer, i))
		case storage && g.Storage != "disk" && !strings.HasPrefix(g.Storage, "redis://") && !strings.HasPrefix(g.Storage, "rediss://"):
			errs = append(errs, fmt.Errorf("%s[%d].storage is %q: want \"disk\" or a redis:// or rediss:// URL", layer, i, g.Storage))
		case !storage && g.Storage != "":
			errs = append(errs, fmt.Errorf("%s[%d] names storage: only oram groups own storage", layer, i))
		case g.Storage == "disk" && len(g.Replicas) > 1:
			// Each replica would open a store of its own in its data
			// directory, and a new leader would read storage its
			// predecessor never wrote.
			errs = append(errs, fmt.Errorf("%s[%d] has %d replicas on \"disk\" storage, which only one process can open: give the group a redis:// URL, or one replica", layer, i, len(g.Replicas)))
		}
		if err := checkRedisServer(layer, i, g, storage); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checkRedisServer checks the redis_server field of group i of a layer.
func checkRedisServer(layer string, i int, g Group, storage bool) error {
	if !g.RedisServer {
		return nil
	}
	if !storage {
		return fmt.Errorf("%s[%d].redis_server: only oram groups own storage", layer, i)
	}
	if _, err := g.RedisServerAddr(); err != nil {
		return fmt.Errorf("%s[%d].redis_server: %w", layer, i, err)
	}
	return nil
}

// RedisServerAddr is the HOST:PORT of the redis-server `oblivkv cluster
// up` starts for g's storage: that of its redis:// URL (port 6379 if the
// URL names none), which must be on loopback and carry no user or
// password. "localhost" is 127.0.0.1.
func (g Group) RedisServerAddr() (string, error) {
	u, err := url.Parse(g.Storage)
	switch {
	case err != nil || u.Scheme != "redis":
		return "", fmt.Errorf("storage %q: want a redis:// URL", g.Storage)
	case u.User != nil:
		return "", fmt.Errorf("storage %q: a redis-server started for the cluster takes no user or password", g.Storage)
	}
	host, port := u.Hostname(), u.Port()
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("storage %q: a redis-server started for the cluster listens on loopback only", g.Storage)
	}
	if port == "" {
		port = "6379"
	}
	return net.JoinHostPort(host, port), nil
}

// AdminID is the id of the cluster's operator: the certificate `oblivkv
// cluster certs` writes for the commands that change a group's
// membership (cluster add-voter, remove-server). No process may take it.
const AdminID = "admin"

// validID is what a process id may be: it names a data directory and a
// certificate.
var validID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// checkNodes checks that ids and addresses are well formed and unique,
// and that none is a redis-server's the cluster starts.
func (c *Config) checkNodes() []error {
	var errs []error
	ids, addrs := map[string]bool{}, map[string]string{}
	for i, g := range c.ORAM {
		if a, err := g.RedisServerAddr(); g.RedisServer && err == nil {
			addrs[a] = fmt.Sprintf("the redis-server of oram[%d]", i)
		}
	}
	for _, n := range c.Nodes() {
		if !validID.MatchString(n.ID) {
			errs = append(errs, fmt.Errorf("process id %q: want lower-case letters, digits and '-', at most 63", n.ID))
		}
		if ids[n.ID] {
			errs = append(errs, fmt.Errorf("process id %q is used twice", n.ID))
		}
		if n.ID == AdminID {
			errs = append(errs, fmt.Errorf("process id %q is reserved for the cluster's operator (its certificate changes groups' membership)", AdminID))
		}
		ids[n.ID] = true
		for _, a := range n.listens() {
			if _, _, err := net.SplitHostPort(a); err != nil {
				errs = append(errs, fmt.Errorf("%s: address %q: %v", n.ID, a, err))
			}
			if other, dup := addrs[a]; dup {
				errs = append(errs, fmt.Errorf("%s and %s both listen on %s", other, n.ID, a))
			}
			addrs[a] = n.ID
		}
	}
	return errs
}

// Node is one process of the cluster.
type Node struct {
	ID    string
	Role  string   // "router", "stash" or "oram"
	Shard int      // the group's index; a router's, its index among the routers
	Addrs []string // the addresses it must listen on (a missing one is "")
	HTTP  string   // where it serves /metrics and /status; "" for nowhere
}

// listens lists every address n listens on.
func (n Node) listens() []string {
	if n.HTTP == "" {
		return n.Addrs
	}
	return append(slices.Clone(n.Addrs), n.HTTP)
}

// Nodes lists every process: routers, then Stash replicas, then ORAM
// replicas, in the file's order.
func (c *Config) Nodes() []Node {
	var nodes []Node
	for i, r := range c.Routers {
		nodes = append(nodes, Node{ID: r.ID, Role: "router", Shard: i, Addrs: []string{r.RESP, r.RPC}, HTTP: r.HTTP})
	}
	nodes = append(nodes, groupNodes("stash", c.Stash)...)
	return append(nodes, groupNodes("oram", c.ORAM)...)
}

// Node returns process id.
func (c *Config) Node(id string) (Node, bool) {
	for _, n := range c.Nodes() {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// groupNodes lists the replicas of one layer's groups.
func groupNodes(role string, groups []Group) []Node {
	var nodes []Node
	for i, g := range groups {
		for _, r := range g.Replicas {
			nodes = append(nodes, Node{ID: r.ID, Role: role, Shard: i, Addrs: []string{r.RPC, r.Raft}, HTTP: r.HTTP})
		}
	}
	return nodes
}

// GroupOf returns the group replica id is one of, and its name (its
// role and shard: "stash-0", "oram-1").
func (c *Config) GroupOf(id string) (name string, g Group, ok bool) {
	n, ok := c.Node(id)
	switch {
	case ok && n.Role == "stash":
		return fmt.Sprintf("stash-%d", n.Shard), c.Stash[n.Shard], true
	case ok && n.Role == "oram":
		return fmt.Sprintf("oram-%d", n.Shard), c.ORAM[n.Shard], true
	}
	return "", Group{}, false
}

// Replica returns g's replica id.
func (g Group) Replica(id string) (Replica, bool) {
	i := slices.IndexFunc(g.Replicas, func(r Replica) bool { return r.ID == id })
	if i < 0 {
		return Replica{}, false
	}
	return g.Replicas[i], true
}
