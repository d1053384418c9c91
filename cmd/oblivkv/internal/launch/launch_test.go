package launch

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/cluster"
)

// TestRedisPortTaken: Start refuses to start a redis-server where
// something already listens, rather than take that server for the
// cluster's, and starts no process.
func TestRedisPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg, err := cluster.Parse(fmt.Appendf(nil, `
store: {protocol: treebeard}
root: %q
routers: [{id: r, resp: "127.0.0.1:1", rpc: "127.0.0.1:2"}]
stash: [{replicas: [{id: s, rpc: "127.0.0.1:3", raft: "127.0.0.1:4"}]}]
oram: [{storage: "redis://%s/0", redis_server: true, replicas: [{id: o, rpc: "127.0.0.1:5", raft: "127.0.0.1:6"}]}]
`, t.TempDir(), ln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(cfg, Options{Exe: "/nonexistent/oblivkv"})
	if err == nil || !strings.Contains(err.Error(), "where something already does") {
		t.Fatalf("Start = %v, %v; want a refusal of the port taken", c, err)
	}
}
