package treebeard

import (
	"bytes"
	"encoding/gob"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// failingParts is a network of direct calls whose trees fail a few of
// the parts they read (the Stash shard sees a failed path read), and
// which delivers a few of the messages to the Stash shards twice at once.
type failingParts struct {
	keys *seal.Keys
	mu   sync.Mutex
	rng  *rand.Rand
	rate float64
}

func (f *failingParts) carry(m Sealed, receive func(Sealed) Sealed, _ bool) (Sealed, Status) {
	var copies sync.WaitGroup
	if m.To.Layer == LayerStash && m.Kind != kindAdmin && f.chance() {
		copies.Go(func() { receive(m) })
	}
	back := receive(m)
	copies.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.Kind == kindReadPaths && f.rng.Float64() < f.rate {
		back = sealWire(f.keys, readPathsReplyCodec, m.ID, m.To, m.From,
			ReadPathsReply{Status: Status{Code: CodeUnavailable, Detail: "injected: the part's read failed"}})
	}
	return back, Status{}
}

func (f *failingParts) chance() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64() < f.rate
}

// encoded returns v as the log would carry it: gob's bytes.
func encoded(t *testing.T, v any) []byte {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// machineRecord is what one machine applied during a run: its image
// before the first entry, every entry and its outputs (encoded) in the
// order applied, and its image at the end.
type machineRecord struct {
	initial, final []byte
	entries        [][]byte
	outputs        [][]byte
}

// note records entry e and its outputs.
func (r *machineRecord) note(t *testing.T, e, out any) {
	r.entries = append(r.entries, encoded(t, e))
	r.outputs = append(r.outputs, encoded(t, out))
}

// machine is a Stash shard's core or a Router's, as the replay drives it.
type machine struct {
	step    func(entry []byte) (output []byte)
	image   func() []byte
	restore func([]byte) error
}

func decoded[V any](t *testing.T, b []byte) V {
	var v V
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func stashMachine(t *testing.T, c *stashCore) machine {
	return machine{step: func(b []byte) []byte { return encoded(t, c.step(decoded[stashEntry](t, b))) },
		image: c.image, restore: c.restoreImage}
}

func routerMachine(t *testing.T, c *routerCore) machine {
	return machine{step: func(b []byte) []byte { return encoded(t, c.step(decoded[routerEntry](t, b))) },
		image: c.image, restore: c.restoreImage}
}

// runOptions shape the store of recordRun (with its epoch and network),
// 256 keys of 32 bytes.
var runOptions = Options{StashShards: 2, A: 2, K: 2}

// testShape returns the shape of a store of 256 keys of 32 bytes under o,
// the recorded runs' stores.
func testShape(t *testing.T, o Options) Shape {
	sh, err := NewShape(256, 32, o)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// recorded is a run recorded once per test binary, for the tests that
// read it (none changes it).
type recorded[R any] struct {
	once sync.Once
	run  R
	ok   bool
}

// get returns the run, recording it with record the first time.
func (r *recorded[R]) get(t *testing.T, record func(*testing.T) R) R {
	r.once.Do(func() {
		r.run = record(t)
		r.ok = true
	})
	if !r.ok {
		t.Fatal("recording the run failed, in the first test that needed it")
	}
	return r.run
}

// stashRun is what recordRun records.
type stashRun struct{ stash, router machineRecord }

var stashRuns recorded[stashRun]

// recordRun runs 8 clients on a store of 2 Stash shards with busy
// evictions, a few failed path reads, a hot key, keys never written and
// deletes, recording what Stash shard 0 and Router 0 apply (once per
// test binary).
func recordRun(t *testing.T) (stash, router machineRecord) {
	r := stashRuns.get(t, func(t *testing.T) stashRun {
		var r stashRun
		r.stash, r.router = runStashRecorded(t)
		return r
	})
	return r.stash, r.router
}

func runStashRecorded(t *testing.T) (stash, router machineRecord) {
	keys := kvtest.NewKeys(t)
	net := &failingParts{keys: keys, rng: rand.New(rand.NewPCG(7, 7)), rate: 0.03}
	o := runOptions
	o.Epoch, o.TestingKnobs.Transport = 100*time.Microsecond, net
	s, err := open(t.Context(), kv.Env{Backend: mem.New(), Keys: keys, Capacity: 256, ValueSize: 32, Fresh: true, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	sh, r := s.stashes[0], s.routers[0]
	sh.mu.Lock()
	stash.initial = sh.core.image()
	sh.applied = func(e stashEntry, out stashOutput) { stash.note(t, e, out) }
	sh.mu.Unlock()
	r.mu.Lock()
	router.initial = r.core.image()
	r.applied = func(e routerEntry, out routerOutput) { router.note(t, e, out) }
	r.mu.Unlock()
	runClients(t, s, 8, 60)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sh.mu.Lock()
	stash.final = sh.core.image()
	sh.mu.Unlock()
	r.mu.Lock()
	router.final = r.core.image()
	r.mu.Unlock()
	return stash, router
}

// replayFrom applies rec's entries from the from-th on to m, checking
// each output against the run's, and returns m's image before each entry
// of at.
func replayFrom(t *testing.T, m machine, rec machineRecord, from int, at []int) map[int][]byte {
	t.Helper()
	images := map[int][]byte{}
	for i := from; i < len(rec.entries); i++ {
		if slices.Contains(at, i) {
			images[i] = m.image()
		}
		if out := m.step(rec.entries[i]); !bytes.Equal(out, rec.outputs[i]) {
			t.Fatalf("entry %d replayed from entry %d gave other outputs than in the run", i, from)
		}
	}
	if !bytes.Equal(m.image(), rec.final) {
		t.Fatalf("replayed from entry %d, the final state differs from the run's", from)
	}
	return images
}

// checkReplay applies rec's entries to a fresh machine restored from
// rec's initial image, then the rest of them to fresh machines restored
// from its images at 20 random points: each gives the run's outputs and
// final state, byte for byte. It returns those 20 images.
func checkReplay(t *testing.T, rec machineRecord, fresh func() machine) [][]byte {
	rng := rand.New(rand.NewPCG(3, 3))
	var cuts []int
	for len(cuts) < 20 {
		if i := 1 + rng.IntN(len(rec.entries)-1); !slices.Contains(cuts, i) {
			cuts = append(cuts, i)
		}
	}
	m := fresh()
	if err := m.restore(rec.initial); err != nil {
		t.Fatal(err)
	}
	images := replayFrom(t, m, rec, 0, cuts)
	var out [][]byte
	for _, i := range cuts {
		m := fresh()
		if err := m.restore(images[i]); err != nil {
			t.Fatal(err)
		}
		replayFrom(t, m, rec, i, nil)
		out = append(out, images[i])
	}
	return out
}

// TestMachinesReplayDeterminism: the entries a Stash shard and a Router
// applied during a run with concurrent clients, a hot key, missing keys,
// deletes, busy evictions, failed path reads and copies of messages
// (answered from the shard's record, or waiting for the first copy's
// reply), applied to a fresh
// machine of the kind restored from the machine's state before the first,
// give the same outputs and the same final state, byte for byte; and so
// do the rest of them applied to a fresh machine restored from the
// replay's state at 20 random points, the Stash shard's with reads in
// flight and epochs half answered.
func TestMachinesReplayDeterminism(t *testing.T) {
	stash, router := recordRun(t)
	sh := testShape(t, runOptions)
	freshStash := func() machine {
		return stashMachine(t, sh.newStashCore([32]byte{9}))
	}
	freshRouter := func() machine { return routerMachine(t, &routerCore{}) }
	t.Run("stash", func(t *testing.T) {
		kinds := map[stashEntryKind]int{}
		for _, b := range stash.entries {
			e := decoded[stashEntry](t, b)
			kinds[e.Kind]++
			if e.Kind == entryResults && e.Failure.Code != CodeOK {
				kinds[0]++ // a failed read
			}
		}
		for k := range entryJournaled + 1 {
			if kinds[k] == 0 {
				t.Fatalf("the run applied no entry of kind %d (0: a failed read): %v", k, kinds)
			}
		}
		stored, pending := 0, 0
		for _, b := range stash.outputs {
			if cp := decoded[stashOutput](t, b).Copy; cp != nil && cp.Pending {
				pending++
			} else if cp != nil {
				stored++
			}
		}
		if stored == 0 || pending == 0 {
			t.Fatalf("copies of messages: %d answered from the record, %d waiting; want some of each", stored, pending)
		}
		midEpoch := 0
		for _, im := range checkReplay(t, stash, freshStash) {
			c := newStashCore(1, tree.NewGeometry(4), 0, 0, [32]byte{})
			if err := c.restoreImage(im); err != nil {
				t.Fatal(err)
			}
			if len(c.inflight) > 0 || len(c.epochs) > 0 {
				midEpoch++
			}
		}
		if midEpoch == 0 {
			t.Fatalf("no snapshot of the 20 was taken with reads in flight or epochs open")
		}
		t.Logf("%d entries (%v), %d copies answered from the record and %d waiting, %d of 20 snapshots mid-epoch",
			len(stash.entries), kinds, stored, pending, midEpoch)
	})
	t.Run("router", func(t *testing.T) {
		cuts, collecting := 0, 0
		for _, b := range router.entries {
			if decoded[routerEntry](t, b).Cut {
				cuts++
			}
		}
		for _, im := range checkReplay(t, router, freshRouter) {
			if decoded[routerImage](t, im).Collecting != nil {
				collecting++
			}
		}
		if cuts == 0 || collecting == 0 {
			t.Fatalf("%d epochs cut, %d of 20 snapshots with requests collecting; want some of each", cuts, collecting)
		}
		t.Logf("%d entries, %d epochs cut, %d of 20 snapshots mid-epoch", len(router.entries), cuts, collecting)
	})
}

// TestStashTakeoverSendsPartsAgain: a Stash shard's machine restored
// from its image after any entry of a run owes (outstanding) exactly the
// parts the run's machine sent the trees whose results had not come back
// by then, each with the same reads, fake ones included; a copy of
// results applied already, coming later, changes nothing.
func TestStashTakeoverSendsPartsAgain(t *testing.T) {
	rec, _ := recordRun(t)
	sh := testShape(t, runOptions)
	fresh := func() *stashCore { return sh.newStashCore([32]byte{}) }
	c := fresh()
	if err := c.restoreImage(rec.initial); err != nil {
		t.Fatal(err)
	}
	sent := map[uint64]map[int][]ringoram.PathRead{} // by epoch and tree: the reads sent whose results are not back
	owing, copies := 0, 0
	resultsOf := map[tree.BlockID]stashEntry{} // the last results applied that brought each block
	for i, b := range rec.entries {
		e := decoded[stashEntry](t, b)
		out := c.step(e)
		switch {
		case e.Kind == entryBatch && out.Copy == nil:
			sent[e.Epoch] = map[int][]ringoram.PathRead{}
			for t, reads := range out.Reads {
				sent[e.Epoch][t] = reads
			}
		case e.Kind == entryResults && sent[e.Epoch] != nil:
			if delete(sent[e.Epoch], e.Tree); len(sent[e.Epoch]) == 0 {
				delete(sent, e.Epoch)
			}
		}
		var want []sentPart
		for _, epoch := range slices.Sorted(maps.Keys(sent)) {
			for _, t := range slices.Sorted(maps.Keys(sent[epoch])) {
				want = append(want, sentPart{Epoch: epoch, Tree: t, Reads: sent[epoch][t]})
			}
		}
		im := c.image()
		taken := fresh()
		if err := taken.restoreImage(im); err != nil {
			t.Fatal(err)
		}
		if got := taken.outstanding(); !bytes.Equal(encoded(t, got), encoded(t, want)) {
			t.Fatalf("taken over after entry %d of %d, the shard owes other parts than the run's had not got back", i, len(rec.entries))
		}
		owing += min(len(want), 1)
		if e.Kind == entryResults {
			for _, res := range e.Real {
				resultsOf[res.Block.ID] = e
			}
		}
		// A copy of results applied already, for a block whose real read
		// is in flight again (a later epoch's), changes nothing.
		for id := range c.inflight {
			r, ok := resultsOf[id]
			if !ok {
				continue
			}
			if again := c.step(r); !reflect.DeepEqual(again, stashOutput{}) || !bytes.Equal(c.image(), im) {
				t.Fatalf("a copy of results applied after entry %d changed the shard or gave outputs", i)
			}
			copies++
			break
		}
	}
	if owing == 0 || copies == 0 {
		t.Fatalf("%d entries left parts owed, %d copies of results; want some of each", owing, copies)
	}
	t.Logf("%d entries, %d leaving parts owed, %d copies of results", len(rec.entries), owing, copies)
}
