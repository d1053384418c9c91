package treebeard

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/cluster/raftgroup"
	"github.com/oblivkv/oblivkv/cluster/raftgroup/raftgrouptest"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/seal"
)

// replicaGroup is a group of 3 replicas of one machine in this process,
// each with its own raft directory, on loopback sockets (plaintext, which
// raftgroup allows on loopback only; its own tests cover mutual TLS).
type replicaGroup struct {
	t          *testing.T
	keys       *seal.Keys
	root       string
	peers      []raftgroup.Peer
	newReplica func() *Replica
	groups     map[string]*raftgroup.Group
	machines   map[string]*Replica
}

func newReplicaGroup(t *testing.T, keys *seal.Keys, newReplica func() *Replica) *replicaGroup {
	g := &replicaGroup{t: t, keys: keys, root: t.TempDir(), newReplica: newReplica, peers: raftgrouptest.Peers(t, 3),
		groups: map[string]*raftgroup.Group{}, machines: map[string]*Replica{}}
	for _, p := range g.peers {
		g.start(p.ID)
	}
	t.Cleanup(func() {
		for id := range g.groups {
			g.stop(id)
		}
	})
	return g
}

func (g *replicaGroup) start(id string) {
	g.t.Helper()
	m := g.newReplica()
	timing := raftgrouptest.Timing()
	timing.SnapshotEvery = 1 << 20 // the test takes its snapshots itself
	timing.TrailingLogs = 16       // and a replica far behind is sent one
	r, err := raftgroup.Open(raftgroup.Config{ID: id, Peers: g.peers, Dir: filepath.Join(g.root, id), Keys: g.keys, Timing: timing}, m)
	if err != nil {
		g.t.Fatal(err)
	}
	g.groups[id], g.machines[id] = r, m
}

func (g *replicaGroup) stop(id string) {
	g.t.Helper()
	if err := g.groups[id].Close(); err != nil {
		g.t.Fatal(err)
	}
	delete(g.groups, id)
}

// leader waits for a leader among the running replicas.
func (g *replicaGroup) leader() string {
	g.t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for id, r := range g.groups {
			if r.IsLeader() {
				return id
			}
		}
	}
	g.t.Fatal("no leader in a minute")
	return ""
}

// propose proposes entry through the leader and returns what applying
// it gave. An entry whose outcome a lost leadership left unknown is not
// proposed again: the test fails, since applying it twice would be
// another run (the test's timing keeps a leader on a loaded machine).
func (g *replicaGroup) propose(entry []byte) (any, error) {
	g.t.Helper()
	return g.groups[g.leader()].Propose(context.Background(), entry)
}

// converged waits until every running replica's machine is the one
// want describes, failing after a minute. raft counts an entry applied
// once it hands it to the machine's goroutine (Status.AppliedIndex), so
// a replica's machine may be a few entries behind what it reports: the
// wait is on the images themselves.
func (g *replicaGroup) converged(want []byte) {
	g.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for id := range g.groups {
		for {
			im, err := g.machines[id].Snapshot()
			if err != nil {
				g.t.Fatal(err)
			}
			if bytes.Equal(im, want) {
				break
			}
			if time.Now().After(deadline) {
				g.t.Fatalf("replica %s's machine is not the run's final one after a minute: %+v, the leader's %+v",
					id, g.groups[id].Status(), g.groups[g.leader()].Status())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// replicate runs rec through a group of 3 replicas made by newReplica,
// each entry the replicated one of its recorded input (input): the
// group is created from rec's initial image, then each of rec's entries
// is proposed in order and must give rec's outputs. A third of the way
// through its leader is stopped (the rest go through a new leader); two
// thirds of the way every replica snapshots, and one follower loses its
// directory and comes back empty, to be sent a snapshot. At the end the
// old leader comes back with its directory and catches up: every
// replica's machine is then byte-identical to rec's final image.
func replicate(t *testing.T, rec machineRecord, newReplica func() *Replica, input func(recorded []byte) []byte) {
	g := newReplicaGroup(t, kvtest.NewKeys(t), newReplica)
	entries, size, gobSize := make([][]byte, len(rec.entries)), 0, 0
	for i, e := range rec.entries {
		entries[i] = input(e)
		size, gobSize = size+len(entries[i]), gobSize+len(e)
	}
	t.Logf("%d entries, %d B each on average (gob: %d B)", len(entries), size/len(entries), gobSize/len(entries))
	if _, err := g.propose(createEntry(rec.initial)); err != nil {
		t.Fatal(err)
	}
	var deposed, wiped string
	for i, e := range entries {
		switch i {
		case len(rec.entries) / 3:
			deposed = g.leader()
			g.stop(deposed)
		case 2 * len(rec.entries) / 3:
			for _, r := range g.groups {
				if err := r.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			for id := range g.groups {
				if !g.groups[id].IsLeader() {
					wiped = id
				}
			}
			g.stop(wiped)
			if err := os.RemoveAll(filepath.Join(g.root, wiped)); err != nil {
				t.Fatal(err)
			}
			g.start(wiped)
		}
		out, err := g.propose(e)
		if err != nil {
			t.Fatalf("entry %d of %d: %v", i, len(rec.entries), err)
		}
		if !bytes.Equal(encoded(t, onlyOutput(t, out)), rec.outputs[i]) {
			t.Fatalf("entry %d of %d gave other outputs than in the run", i, len(rec.entries))
		}
	}
	g.start(deposed)
	g.converged(rec.final)
	if s := g.groups[wiped].Status(); s.LastSnapshot == 0 {
		t.Fatalf("the replica whose directory was lost caught up without a snapshot: %+v", s)
	}
}

// onlyOutput returns the one output of an entry of one input.
func onlyOutput(t *testing.T, out any) any {
	t.Helper()
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Slice || v.Len() != 1 {
		t.Fatalf("an entry of one input gave %T", out)
	}
	return v.Index(0).Interface()
}

// roundTrip returns the replicated entry of the input a run recorded
// (gob), checking that it decodes to the same input.
func roundTrip[E any](t *testing.T, recorded []byte, input func(E) []byte, decode func(*delta.Decoder) E) []byte {
	entry := input(decoded[E](t, recorded))
	d := delta.NewDecoder(entry[1:])
	if back := decode(d); d.Done() != nil || !bytes.Equal(encoded(t, back), recorded) {
		t.Fatalf("an input decodes otherwise than it was (%v)", d.Done())
	}
	return entry
}

// TestStashShardReplicated: the entries a Stash shard applied in a run
// (concurrent clients, a hot key, missing keys, deletes, busy evictions,
// failed path reads, copies of messages), committed through a raft group
// of 3 replicas whose leader is stopped and one of whose followers loses
// its directory midway, give the run's outputs, and every replica ends
// with the run's final state, byte for byte.
func TestStashShardReplicated(t *testing.T) {
	rec, _ := recordRun(t)
	sh := testShape(t, runOptions)
	replicate(t, rec, func() *Replica {
		r, err := NewStashReplica(sh)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}, func(b []byte) []byte { return roundTrip(t, b, stashInput, decodeStashEntry) })
}

// TestTreeReplicated: the same for a tree's machine, over a run with
// failed Reads, early reshuffles, evictions, an epoch given up and copies
// of parts (recordTreeRun).
func TestTreeReplicated(t *testing.T) {
	rec := recordTreeRun(t)
	sh := testShape(t, treeRunOptions)
	replicate(t, rec, func() *Replica {
		r, err := NewTreeReplica(sh, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}, func(b []byte) []byte { return roundTrip(t, b, treeInput, decodeORAMEntry) })
}

// TestReplicaEntriesInOrder: an input before the entry that creates the
// machine, a second creation, an entry of no known kind and an input
// truncated or followed by more bytes are refused, and change nothing.
func TestReplicaEntriesInOrder(t *testing.T) {
	sh, err := NewShape(256, 32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewStashReplica(sh)
	if err != nil {
		t.Fatal(err)
	}
	input := stashInput(stashEntry{Kind: entryRelease})
	if _, err := r.Apply(input); !errors.Is(err, errNotCreated) {
		t.Fatalf("an input before the creation: %v, want %v", err, errNotCreated)
	}
	if im, _ := r.Snapshot(); im != nil {
		t.Fatal("a machine no entry created has a snapshot")
	}
	if _, err := r.Apply(r.Create()); err != nil {
		t.Fatal(err)
	}
	before, _ := r.Snapshot()
	if _, err := r.Apply(r.Create()); !errors.Is(err, errCreatedTwice) {
		t.Fatalf("a second creation: %v, want %v", err, errCreatedTwice)
	}
	if _, err := r.Apply([]byte{9}); !errors.Is(err, errEntryKind) {
		t.Fatalf("an entry of kind 9: %v, want %v", err, errEntryKind)
	}
	if _, err := r.Apply(input[:len(input)-1]); err == nil {
		t.Fatal("a truncated input applied")
	}
	if _, err := r.Apply(append(slices.Clip(input), 0)); err == nil {
		t.Fatal("an input with a byte too many applied")
	}
	if after, _ := r.Snapshot(); !bytes.Equal(before, after) {
		t.Fatal("a refused entry changed the machine")
	}
	if _, err := r.Apply(input); err != nil {
		t.Fatalf("an input once created: %v", err)
	}
}

// TestEarlierStashEntries: a Stash shard's entry as an earlier build
// wrote it (replicaInput, its requests with no name) applies as this
// build's entry of the same requests carrying no name does, and leaves
// the block it stores unnamed; read as this build's kind, it is refused.
func TestEarlierStashEntries(t *testing.T) {
	sh, err := NewShape(256, 32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := blockID("k")
	e := stashEntry{Kind: entryBatch, Msg: MsgID{Sender: Endpoint{LayerRouter, 0}, Epoch: 1}, Epoch: 1, Room: 1,
		Batch: []Request{{Op: OpPut, ID: id, Value: []byte("v")}}}
	unnamed := stashInput(e)
	// The earlier encoding lacks what follows the id: the flag that says
	// the request carries no name, and the empty name's length.
	earlier := append([]byte{replicaInput}, bytes.Replace(unnamed[1:], append(id[:], 0, 0), id[:], 1)...)
	if len(earlier) != len(unnamed)-2 {
		t.Fatal("the test could not write the earlier encoding")
	}
	images := make([][]byte, 2)
	var outs [2]any
	var create []byte
	var r *Replica
	for i, entry := range [][]byte{earlier, unnamed} {
		var core *stashCore
		if r, core, err = newStashReplica(sh); err != nil {
			t.Fatal(err)
		}
		if create == nil {
			create = r.Create()
		}
		if _, err := r.Apply(create); err != nil {
			t.Fatal(err)
		}
		if outs[i], err = r.Apply(entry); err != nil {
			t.Fatal(err)
		}
		if exists, _ := core.has(id); !exists || len(core.names) != 0 {
			t.Fatalf("after the entry the block exists: %v, and the shard names %d blocks; want true, 0", exists, len(core.names))
		}
		images[i], _ = r.Snapshot()
	}
	if !reflect.DeepEqual(outs[0], outs[1]) || !bytes.Equal(images[0], images[1]) {
		t.Fatal("an earlier build's entry and this build's differ in outputs or state")
	}
	if _, err := r.Apply(append([]byte{replicaNamedInput}, earlier[1:]...)); err == nil {
		t.Fatal("an earlier entry read as this build's applied")
	}
}
