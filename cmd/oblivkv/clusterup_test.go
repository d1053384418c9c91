package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/internal/testsupport/syncbuf"
)

// upConfig writes into dir a cluster of 2 routers, a Stash group of 3
// replicas and 2 ORAM groups of one replica, each on a redis-server of
// its own that cluster up starts, every process serving http, all on
// free loopback ports; it returns the file and the routers' RESP
// addresses.
func upConfig(t *testing.T, dir string) (string, []string) {
	t.Helper()
	a := newDistinctAddrs(t).next
	resp := []string{a(), a()}
	replica := func(id string) string {
		return fmt.Sprintf("{id: %s, rpc: %q, raft: %q, http: %q}", id, a(), a(), a())
	}
	doc := fmt.Sprintf(`store: {protocol: treebeard, capacity: 256, value_size: 64, options: {trees: "2"}}
root: data
routers:
  - {id: router-0, resp: %q, rpc: %q, http: %q}
  - {id: router-1, resp: %q, rpc: %q, http: %q}
stash:
  - replicas: [%s, %s, %s]
oram:
  - {storage: "redis://%s/0", redis_server: true, replicas: [%s]}
  - {storage: "redis://%s/0", redis_server: true, replicas: [%s]}
`, resp[0], a(), a(), resp[1], a(), a(), replica("stash-a"), replica("stash-b"), replica("stash-c"),
		a(), replica("oram-0"), a(), replica("oram-1"))
	path := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, resp
}

// TestClusterUp: oblivkv cluster up starts a cluster's redis-servers and
// processes as children; cluster status shows a leader in every group
// and every router up; a key SET through each router reads back through
// the other; a child killed is reported and not restarted; and at SIGINT
// up stops every other child, each exiting cleanly and leaving the CPU
// profile --cpuprofile-dir asked for, and exits 0.
func TestClusterUp(t *testing.T) {
	redistest.Require(t, "redis-server")
	dir := t.TempDir()
	config, routers := upConfig(t, dir)
	profiles := filepath.Join(dir, "profiles")
	up := mainCmd(dir, "cluster", "up", "--config", config, "--plaintext", "--cpuprofile-dir", profiles)
	var out, errOut syncbuf.Buffer
	up.Stdout, up.Stderr = &out, &errOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- up.Wait() }()
	t.Cleanup(func() { up.Process.Kill(); <-exited })
	waitClusterUp(t, config, exited, &errOut)
	for i, addr := range routers {
		key, other := fmt.Sprintf("k%d", i), routers[1-i]
		if err := upClient(t, addr).Set(t.Context(), key, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s through %s: %v", key, addr, err)
		}
		if got, err := upClient(t, other).Get(t.Context(), key).Result(); err != nil || got != "v" {
			t.Fatalf("GET %s through %s = %q, %v; want v", key, other, got, err)
		}
	}

	children := upChildren(t, out.String())
	killed := fmt.Sprintf("stash-c (pid %d)", children["stash-c"])
	if err := syscall.Kill(children["stash-c"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	for !strings.Contains(errOut.String(), killed+" exited: signal: killed;") {
		if time.Since(killedAt) > 10*time.Second {
			t.Fatalf("cluster up does not report that %s exited:\n%s", killed, errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	delete(children, "stash-c")
	if err := up.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("cluster up exited with %v after SIGINT:\n%s", err, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("cluster up still runs 30 s after SIGINT:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "stopped "+killed+": signal: killed\n") {
		t.Errorf("cluster up restarted %s, or does not say how it ended:\n%s", killed, errOut.String())
	}
	for name, pid := range children {
		logFile := filepath.Join(dir, "data", name, "log")
		if !stoppedCleanly(errOut.String(), name, pid) {
			log, _ := os.ReadFile(logFile)
			t.Errorf("no clean stop of %s reported:\n%s\n%s's log:\n%s", name, errOut.String(), name, log)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still runs after cluster up exited", name, pid)
		}
		if strings.HasPrefix(name, "redis-") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(profiles, name+".pprof")); err != nil || fi.Size() == 0 {
			t.Errorf("%s left no CPU profile in %s (%v)", name, profiles, err)
		}
	}
}

// stoppedCleanly reports whether cluster up says child name stopped with
// status 0.
func stoppedCleanly(upErr, name string, pid int) bool {
	return strings.Contains(upErr, fmt.Sprintf("stopped %s (pid %d): exit status 0\n", name, pid))
}

// waitClusterUp waits until cluster status shows every router up and a
// leader in every group, failing if up exits first.
func waitClusterUp(t *testing.T, config string, exited chan error, errOut *syncbuf.Buffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var r clusterReport
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("cluster up exited (%v):\n%s", err, errOut.String())
		case <-time.After(200 * time.Millisecond):
		}
		out, err := runRootCmd(t, "cluster", "status", "--config", config, "--json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if r.ready() {
			return
		}
	}
	t.Fatalf("no leader in every group, or a router down, 30 s after cluster up started: %+v\n%s", r, errOut.String())
}

// ready reports whether every router is up and every group has a leader.
func (r clusterReport) ready() bool {
	for _, p := range r.Routers {
		if !p.Up {
			return false
		}
	}
	for _, g := range append(r.Stash, r.ORAM...) {
		if g.Leader == "" {
			return false
		}
	}
	return true
}

// upClient is a client of a router, patient with a store's first
// requests on a loaded machine.
func upClient(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, Protocol: 2, ReadTimeout: 20 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// childLine is a line of cluster up's table of its children.
var childLine = regexp.MustCompile(`(?m)^(\S+) +(?:router|stash|oram|redis) +(\d+) `)

// upChildren returns the children cluster up says it started, by name.
func upChildren(t *testing.T, out string) map[string]int {
	t.Helper()
	children := map[string]int{}
	for _, m := range childLine.FindAllStringSubmatch(out, -1) {
		children[m[1]], _ = strconv.Atoi(m[2])
	}
	if len(children) != 2+3+2+2 {
		t.Fatalf("cluster up lists %d children, want 9:\n%s", len(children), out)
	}
	return children
}
