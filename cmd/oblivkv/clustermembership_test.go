package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestClusterMembership: under a light load of writes through the
// router, each of a cluster's ORAM group and Stash group gets a 4th
// replica (added to the file, given a certificate, started with --join,
// add-voter), loses its leader (remove-server: it stops on its own), and then
// one of its two remaining first replicas (kill -9), so that its quorum
// needs the new replica: writes go on at every step, and every
// acknowledged write reads back at the end.
func TestClusterMembership(t *testing.T) {
	goredis.SetLogger(quietLogger{})
	c := startClusterLayout(t, clusterLayout{routers: 1, groups: 1}, "")
	for _, g := range []string{"stash-0", "oram-0"} {
		if _, err := c.waitLeader(g, ""); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := runMain(c.dir, "cluster", "add-voter", "--config", c.config, "--id", "stash-0-z"); err == nil || !strings.Contains(out, `no replica "stash-0-z"`) {
		t.Fatalf("add-voter of an id the file does not name: %v: %s", err, out)
	}
	w := c.startWrites(4)
	for _, group := range []string{"oram-0", "stash-0"} {
		c.replaceReplicas(group, w)
	}
	w.stop()
	w.checkReadBack(t, c.routes[0])
}

// replaceReplicas adds group-d to group, removes its leader (which stops),
// then kills another of its first replicas, checking its members and
// that writes go on at each step.
func (c *clusterProcs) replaceReplicas(group string, w *writes) {
	t := c.t
	added := group + "-d"
	c.addReplica(group, added)
	if ids := c.memberIDs(added, 4); !slices.Contains(ids, added) {
		t.Fatalf("%s's members after add-voter: %v, want 4 with %s", group, ids, added)
	}
	w.progress(t, "after "+added+" was added")

	old, err := c.waitLeader(group, "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runMain(c.dir, "cluster", "remove-server", "--config", c.config, "--id", old); err != nil || !strings.Contains(out, old+" removed from its group") {
		t.Fatalf("remove-server %s: %v: %s", old, err, out)
	}
	c.waitRemovedExit(old)
	c.editConfig(func(doc string) string {
		return regexp.MustCompile(`(?m)^.*\{id: `+old+`,.*\n`).ReplaceAllString(doc, "")
	})
	if ids := c.memberIDs(added, 3); slices.Contains(ids, old) || !slices.Contains(ids, added) {
		t.Fatalf("%s's members after removing %s: %v, want 3 with %s", group, old, ids, added)
	}
	if _, err := c.waitLeader(group, old); err != nil {
		t.Fatal(err)
	}
	w.progress(t, "after "+old+" was removed")

	for _, id := range c.memberIDs(added, 3) {
		if id != added {
			c.kill(id)
			t.Logf("%s: added %s, removed %s, killed %s", group, added, old, id)
			break
		}
	}
	w.progress(t, "with "+added+" in the quorum")
}

// waitRemovedExit waits until replica id, just removed from its group,
// stops on its own, and requires that it said why and exited cleanly.
func (c *clusterProcs) waitRemovedExit(id string) {
	t := c.t
	c.mu.Lock()
	p := c.procs[id]
	c.mu.Unlock()
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil || !strings.Contains(p.out.String(), "removed from its group: shutting down") {
			t.Fatalf("%s, removed, exited with %v; its log:\n%s", id, err, p.out.String())
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-exited // the cleanup's kill must not wait for it too
		c.mu.Lock()
		p.alive = false
		c.mu.Unlock()
		t.Fatalf("%s, removed from its group, still ran after 30 s; its log:\n%s", id, p.out.String())
	}
	c.mu.Lock()
	p.alive = false
	c.mu.Unlock()
}

// addReplica adds replica id to group as an operator does: in the
// configuration file, with a certificate, started with --join, and then
// add-voter.
func (c *clusterProcs) addReplica(group, id string) {
	t := c.t
	role := group[:strings.Index(group, "-")]
	line := fmt.Sprintf("      - {id: %s, rpc: %q, raft: %q}\n", id, c.addrs.next(), c.addrs.next())
	c.editConfig(func(doc string) string {
		last := regexp.MustCompile(`(?m)^.*\{id: ` + group + `-c,.*\n`)
		return last.ReplaceAllStringFunc(doc, func(l string) string { return l + line })
	})
	if out, err := runMain(c.dir, "cluster", "certs", "--config", c.config); err != nil || !strings.Contains(out, "wrote 1 certificates") {
		t.Fatalf("cluster certs for %s: %v: %s", id, err, out)
	}
	c.start(role, id, "--join")
	out, err := runMain(c.dir, "cluster", "add-voter", "--config", c.config, "--id", id)
	if err != nil || !strings.Contains(out, id+" added to its group") {
		t.Fatalf("add-voter %s: %v: %s", id, err, out)
	}
}

// editConfig rewrites the configuration file with edit.
func (c *clusterProcs) editConfig(edit func(string) string) {
	c.t.Helper()
	doc, err := os.ReadFile(c.config)
	if err != nil {
		c.t.Fatal(err)
	}
	next := edit(string(doc))
	if next == string(doc) {
		c.t.Fatalf("the edit changed nothing in:\n%s", doc)
	}
	if err := os.WriteFile(c.config, []byte(next), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// memberIDs waits until cluster members, asked about replica id's group,
// lists n members, each up, one of them leading, and returns their ids.
func (c *clusterProcs) memberIDs(id string, n int) []string {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r, out, err := c.members(id)
		var ids []string
		up := 0
		for _, m := range r.Members {
			ids = append(ids, m.ID)
			if m.Up {
				up++
			}
		}
		if err == nil && len(ids) == n && up == n && slices.Contains(ids, r.Leader) {
			return ids
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("cluster members --id %s: %v; want %d members up and a leader:\n%s", id, err, n, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// members runs cluster members --json about replica id's group.
func (c *clusterProcs) members(id string) (membersReport, string, error) {
	var r membersReport
	out, err := runMain(c.dir, "cluster", "members", "--config", c.config, "--id", id, "--json")
	if err == nil {
		err = json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &r)
	}
	return r, out, err
}

// writes is a light load of SETs, each client on keys of its own, which
// remembers every acknowledged one.
type writes struct {
	stopping context.CancelFunc
	wg       sync.WaitGroup
	acked    atomic.Int64
	mu       sync.Mutex
	last     map[string]string   // each key's last acknowledged value
	unknown  map[string][]string // the values of each key's failed SETs since
}

// startWrites starts clients that SET their keys over and over through
// the router.
func (c *clusterProcs) startWrites(clients int) *writes {
	ctx, cancel := context.WithCancel(c.t.Context())
	w := &writes{stopping: cancel, last: map[string]string{}, unknown: map[string][]string{}}
	for i := range clients {
		w.wg.Go(func() {
			st := newRESPStore(c.routes[0])
			defer st.Close()
			for n := 1; ctx.Err() == nil; n++ {
				key, val := fmt.Sprintf("m/%d/%d", i, n%25), strconv.Itoa(n)
				w.record(key, val, st.Put(ctx, key, []byte(val)))
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	return w
}

// record notes the outcome of a SET of key to val.
func (w *writes) record(key, val string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.unknown[key] = append(w.unknown[key], val)
		return
	}
	w.last[key] = val
	delete(w.unknown, key)
	w.acked.Add(1)
}

// progress waits until 30 more SETs have been acknowledged.
func (w *writes) progress(t *testing.T, when string) {
	t.Helper()
	want := w.acked.Load() + 30
	deadline := time.Now().Add(time.Minute)
	for w.acked.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: writes stopped (%d acknowledged, want %d)", when, w.acked.Load(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *writes) stop() {
	w.stopping()
	w.wg.Wait()
}

// checkReadBack checks that every key reads back as its last
// acknowledged SET, or as one of the SETs that failed after it.
func (w *writes) checkReadBack(t *testing.T, router string) {
	t.Helper()
	st := newRESPStore(router)
	defer st.Close()
	for key, want := range w.last {
		v, ok, err := st.Get(context.Background(), key)
		if err != nil || !ok || (string(v) != want && !slices.Contains(w.unknown[key], string(v))) {
			t.Errorf("%s reads %q (found %v, err %v); its last acknowledged SET wrote %q", key, v, ok, err, want)
		}
	}
	t.Logf("%d SETs acknowledged, %d keys read back", w.acked.Load(), len(w.last))
}
