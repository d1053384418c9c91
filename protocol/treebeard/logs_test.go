package treebeard

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// logsStore is a store of 2 Stash shards and 2 trees with busy evictions
// over b, journaled in dir.
type logsStore struct {
	t    *testing.T
	mem  *mem.Backend // reopened at each open
	b    backend.Backend
	keys *seal.Keys
	dir  string
	opts Options
}

func (l logsStore) env(j *journal.Journal, fresh bool) kv.Env {
	l.mem.Reopen()
	return kv.Env{Backend: l.b, Keys: l.keys, Capacity: 256, ValueSize: 32, Fresh: fresh, Journal: j, Options: l.opts}
}

func (l logsStore) open(fresh bool) (*store, *journal.Journal) {
	l.t.Helper()
	j, err := journal.Open(l.dir, l.keys, journal.Options{})
	if err != nil {
		l.t.Fatal(err)
	}
	s, err := open(l.t.Context(), l.env(j, fresh))
	if err != nil {
		j.Crash()
		l.t.Fatal(err)
	}
	return s, j
}

// ignored is a machine whose checkpoint and records a replay passes over.
type ignored struct{}

func (ignored) Restore([]byte) error      { return nil }
func (ignored) Apply([]byte) error        { return nil }
func (ignored) Snapshot() ([]byte, error) { return nil, nil }

// replayedImages rebuilds the machines of the store journaled in l.dir
// from the journal, only's alone when only is set (the others' checkpoints
// and records passed over), and returns each machine's state as rebuilt:
// a Stash shard's checkpoint, a tree's checkpoint with the operations,
// plan and eviction its records leave open.
func (l logsStore) replayedImages(only *durable.MachineID) map[durable.MachineID]string {
	l.t.Helper()
	j, err := journal.Open(l.dir, l.keys, journal.Options{})
	if err != nil {
		l.t.Fatal(err)
	}
	defer j.Close()
	log := durable.New(j, l.b, l.keys)
	s, err := build(l.env(j, false), l.opts.EnsureDefaults(256), log)
	if err != nil {
		l.t.Fatal(err)
	}
	rp := newReplayer(s, false)
	machines := map[durable.MachineID]durable.Machine{}
	pick := func(id durable.MachineID, m durable.Machine) {
		machines[id] = m
		if only != nil && *only != id {
			machines[id] = ignored{}
		}
	}
	initialised := make([]bool, len(s.workers))
	for i, st := range s.stashes {
		pick(stashMachineID(i), stashReplay{s: s, st: st})
	}
	for t, w := range s.workers {
		pick(treeMachineID(t), treeReplay{rp: rp, w: w, initialised: &initialised[t]})
	}
	if _, err := log.ReplayMachines(l.t.Context(), machines); err != nil {
		l.t.Fatal(err)
	}
	out := map[durable.MachineID]string{}
	for i, st := range s.stashes {
		out[stashMachineID(i)] = string(st.core.checkpoint())
	}
	for t, w := range s.workers {
		var changes []string
		for _, op := range rp.ops[t] {
			changes = append(changes, fmt.Sprintf("%+v", op.change))
		}
		out[treeMachineID(t)] = fmt.Sprintf("%x %v %+v %+v", w.checkpoint(true), changes, rp.plans[t], rp.pending[t])
	}
	return out
}

// TestReplayStaysInItsMachine: the store is crashed the moment a Stash
// shard gets a block a tree's read took out, so that the tree's record of
// the read is journaled and the shard's record of its epoch never comes.
// Rebuilt from the journal, that block is in no machine's state but the
// tree's (which keeps it for the shard, handover); and every machine
// rebuilt alone, the others' checkpoints and records passed over,
// reaches the state it reaches when all are rebuilt: no record of one
// machine changes another. Reopened, the store serves every key.
func TestReplayStaysInItsMachine(t *testing.T) {
	b := mem.New()
	l := logsStore{t: t, mem: b, b: b, keys: kvtest.NewKeys(t), dir: t.TempDir(),
		opts: Options{StashShards: 2, Trees: 2, A: 2, K: 2, Epoch: 100 * time.Microsecond}}
	s, j := l.open(true)
	for i := range 24 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var crashed atomic.Bool
	for _, st := range s.stashes {
		st.mu.Lock()
		st.applied = func(e stashEntry, _ stashOutput) {
			// The crash falls between the tree's record, made durable
			// here (it has no fsync of its own), and the shard's.
			if e.Kind == entryResults && len(e.Real) > 0 && e.Real[0].Found && crashed.CompareAndSwap(false, true) {
				j.Sync(j.Last())
				j.Crash()
			}
		}
		st.mu.Unlock()
	}
	runClients(t, s, 4, 10)
	s.Close() // fails: the journal died
	if !crashed.Load() {
		t.Fatal("no real read came back")
	}
	full := l.replayedImages(nil)
	if !l.blockOnlyTheTreeKeeps() {
		t.Fatal("rebuilt from the journal, no block read before the crash is kept by its tree alone")
	}
	for id, want := range full {
		if got := l.replayedImages(&id)[id]; got != want {
			t.Errorf("machine %d rebuilt alone differs from machine %d rebuilt with the others", id, id)
		}
	}
	s, j = l.open(false)
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		j.Close()
	}()
	for i := range 24 {
		if _, _, err := s.Get(t.Context(), fmt.Sprint("k", i)); err != nil {
			t.Fatalf("after the crash, Get(k%d): %v", i, err)
		}
	}
}

// blockOnlyTheTreeKeeps reports whether, rebuilt from the journal, a tree
// keeps a block for its Stash shard that the shard holds where the read
// found it and not in its stash: the block a crash cut off between the
// tree's record and the shard's.
func (l logsStore) blockOnlyTheTreeKeeps() bool {
	j, err := journal.Open(l.dir, l.keys, journal.Options{})
	if err != nil {
		l.t.Fatal(err)
	}
	defer j.Close()
	s, err := build(l.env(j, false), l.opts.EnsureDefaults(256), durable.New(j, l.b, l.keys))
	if err != nil {
		l.t.Fatal(err)
	}
	if _, err := s.replay(l.t.Context()); err != nil {
		l.t.Fatal(err)
	}
	for t, w := range s.workers {
		for _, h := range w.m.kept {
			c := s.stashes[shardOf(h.Block.Block.ID, len(s.stashes))].core
			exists, stashed := c.has(h.Block.Block.ID)
			if exists && !stashed && c.pos[h.Block.Block.ID] == (Position{Tree: t, Leaf: h.Block.Leaf}) {
				return true
			}
		}
	}
	return false
}

// gatedReads holds every Read of tree `tree` once closed, until opened.
type gatedReads struct {
	backend.Backend
	tree    int
	closed  atomic.Bool
	held    atomic.Int32 // Reads of the tree waiting
	open    chan struct{}
	openOne sync.Once
}

func newGatedReads(b backend.Backend, tree int) *gatedReads {
	return &gatedReads{Backend: b, tree: tree, open: make(chan struct{})}
}

func (g *gatedReads) release() { g.openOne.Do(func() { close(g.open) }) }

func (g *gatedReads) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if g.closed.Load() && strings.HasPrefix(addrs[0], TreePrefix(g.tree)) {
		g.held.Add(1)
		<-g.open
	}
	return g.Backend.Read(ctx, addrs)
}

// TestCheckpointWhileTreeBlocked: with every record making a machine's
// checkpoint due, storage holds a Read of each tree in the middle of an
// operation; once both are held, tree 1's goes through, and tree 1 (and
// the Stash shards, which journal the ends of its evictions) write
// checkpoints while tree 0 is still held, so no checkpoint waits for tree
// 0. Once tree 0's Read goes through, every client is answered and the
// store reopens from its journal with every key.
func TestCheckpointWhileTreeBlocked(t *testing.T) {
	b := mem.New()
	g0 := newGatedReads(b, 0)
	g1 := newGatedReads(g0, 1)
	l := logsStore{t: t, mem: b, b: g1, keys: kvtest.NewKeys(t), dir: t.TempDir(),
		opts: Options{StashShards: 2, Trees: 2, A: 1, K: 1, Epoch: 50 * time.Microsecond}}
	s, j := l.open(true)
	for i := range 24 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	s.log.SetEvery(1)
	g0.closed.Store(true)
	g1.closed.Store(true)
	var clients sync.WaitGroup
	for c := range 32 {
		clients.Go(func() {
			if err := s.Put(context.Background(), fmt.Sprint("k", c%24), []byte{byte(c)}); err != nil {
				t.Errorf("Put: %v", err)
			}
		})
	}
	defer func() { // on a failure too: no client outlives the test
		g0.release()
		g1.release()
		clients.Wait()
	}()
	waitFor(t, "Reads of trees 0 and 1 held", func() bool { return g0.held.Load() > 0 && g1.held.Load() > 0 })
	before := j.Stats().Checkpoints
	g1.release()
	waitFor(t, "checkpoint while tree 0 is blocked", func() bool { return j.Stats().Checkpoints > before })
	// Tree 1 journaled the plan of the operation whose Read was held: only
	// a checkpoint of its own covers it, and the Stash shards' records too,
	// though tree 1 and the shards may have no step left to take while
	// tree 0 is held (machineLog.again).
	logs := []*machineLog{s.workers[1].log, s.stashes[0].log, s.stashes[1].log}
	waitFor(t, "checkpoints of tree 1 and the Stash shards covering their records while tree 0 is blocked", func() bool {
		return !slices.ContainsFunc(logs, func(l *machineLog) bool { return l.Due() || l.busy.Load() })
	})
	w := s.workers[0]
	w.mu.Lock()
	inProgress := !w.m.idle()
	w.mu.Unlock()
	if !inProgress {
		t.Fatal("tree 0 has no operation in progress while its Read is held")
	}
	g0.release()
	clients.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	g0.closed.Store(false)
	g1.closed.Store(false)
	s, j = l.open(false)
	defer func() {
		s.Close()
		j.Close()
	}()
	for i := range 24 {
		if _, ok, err := s.Get(t.Context(), fmt.Sprint("k", i)); err != nil || !ok {
			t.Fatalf("reopened, Get(k%d) = %v, %v", i, ok, err)
		}
	}
}

// waitFor waits until cond holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in a minute", what)
		}
	}
}

// TestOpensEarlierBuildsJournal: a store whose journal has an earlier
// build's layout (machine 0: a checkpoint of the whole store, and its
// records after it) opens: it is replayed as the earlier build did, every
// machine is checkpointed in its own log and machine 0 retired; it serves
// the keys of the checkpoint and of the record, and opens again from the
// logs per machine.
func TestOpensEarlierBuildsJournal(t *testing.T) {
	b, keys := mem.New(), kvtest.NewKeys(t)
	l := logsStore{t: t, mem: b, b: b, keys: keys, dir: t.TempDir(), opts: Options{StashShards: 2, Trees: 2, Epoch: -1}}
	s, j := l.open(true)
	for i := range 10 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	st := s.encodeState()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	j.Close()

	l.dir = t.TempDir() // the earlier build's journal of the same storage
	j, err := journal.Open(l.dir, keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.Reopen()
	log := durable.New(j, b, keys)
	if err := log.Create(t.Context(), encodeGob(st)); err != nil {
		t.Fatal(err)
	}
	id := tree.IDOf(keys, "new")
	c := newStashCore(2, s.geo, 256, 32, [32]byte{})
	c.setPosition(id, Position{Tree: 1, Leaf: 0})
	c.setStashed(id, []byte("stashed"))
	if _, err := log.Commit(c.blocksDelta([]tree.BlockID{id})); err != nil {
		t.Fatal(err)
	}
	j.Close()

	for round := range 2 {
		s, j := l.open(false)
		for i := range 10 {
			if v, ok, err := s.Get(t.Context(), fmt.Sprint("k", i)); err != nil || !ok || !bytes.Equal(v, []byte{byte(i)}) {
				t.Fatalf("open %d: Get(k%d) = %v, %v, %v", round, i, v, ok, err)
			}
		}
		if v, _, err := s.Get(t.Context(), "new"); err != nil || string(v) != "stashed" {
			t.Fatalf("open %d: Get(new) = %q, %v; want the record's value", round, v, err)
		}
		cps := s.log.Checkpointed() // as the open found them
		if upgraded := len(cps[legacyMachine]) == 0 && cps[treeMachineID(1)] != nil && cps[stashMachineID(1)] != nil; upgraded != (round == 1) {
			t.Fatalf("open %d found a journal with machine 0 %v and a machine per Stash shard and tree %v; want the earlier build's, then this one's", round, len(cps[legacyMachine]) > 0, upgraded)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		j.Close()
	}
}

// TestReshardKeepsKeys: reopened with more Stash shards, then fewer, the
// store moves its blocks to the shards they hash to and keeps every key;
// reopened with the number left to the journal, it has the shards it
// last had (the machines of the others retired).
func TestReshardKeepsKeys(t *testing.T) {
	b := mem.New()
	l := logsStore{t: t, mem: b, b: b, keys: kvtest.NewKeys(t), dir: t.TempDir(), opts: Options{StashShards: 2, Trees: 2, Epoch: -1}}
	s, j := l.open(true)
	for i := range 16 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	for _, shards := range []int{3, 1, 0} {
		l.opts.StashShards = shards
		s, j := l.open(false)
		if want := max(shards, 1); len(s.stashes) != want {
			t.Fatalf("opened with %d Stash shards, the store has %d", shards, len(s.stashes))
		}
		for i := range 16 {
			if v, ok, err := s.Get(t.Context(), fmt.Sprint("k", i)); err != nil || !ok || !bytes.Equal(v, []byte{byte(i)}) {
				t.Fatalf("with %d Stash shards, Get(k%d) = %v, %v, %v", shards, i, v, ok, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		j.Close()
	}
}
