package treebeard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// failingReads fails a few of storage's Reads, once on, with a transport
// error: a slot Read is issued again, a metadata Read fails its
// operation.
type failingReads struct {
	backend.Backend
	on   atomic.Bool
	mu   sync.Mutex
	rng  *rand.Rand
	rate float64
}

var errInjectedRead = errors.New("injected: storage failed the Read")

func (f *failingReads) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if f.on.Load() && f.roll() {
		return nil, errInjectedRead
	}
	return f.Backend.Read(ctx, addrs)
}

func (f *failingReads) roll() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64() < f.rate
}

// oramMachineOf drives m as the replay does.
func oramMachineOf(t *testing.T, m *oramMachine) machine {
	return machine{step: func(b []byte) []byte { return encoded(t, m.apply(decoded[oramEntry](t, b))) },
		image: m.image, restore: m.restoreImage}
}

// recordTreeRun runs 8 clients, with a hot key, keys never written and
// deletes, on a store of 2 Stash shards with busy evictions and early
// reshuffles (Z = 1, S = 2), reopened from its journal so that its trees read
// their buckets' metadata again, with a few of storage's Reads failing
// and a few messages delivered twice at once or once more late,
// then with Stash shard 1 cut off until tree 0 has given up an epoch
// (cutOffShard), then checks that the store serves Puts once both heal,
// and delivers a copy of the run's first part once more;
// it records what tree 0's machine applies (once per test binary).
func recordTreeRun(t *testing.T) machineRecord { return treeRuns.get(t, runTreeRecorded) }

var treeRuns recorded[machineRecord]

// treeRunOptions shape the store of recordTreeRun (with its epoch,
// network and part timeout), 256 keys of 32 bytes.
var treeRunOptions = Options{StashShards: 2, Trees: 2, Z: 1, S: 2, A: 2, K: 2}

// freshTree returns a maker of fresh machines of tree 0 of recordTreeRun's
// store.
func freshTree(t *testing.T) func() *oramMachine {
	sh := testShape(t, treeRunOptions)
	return func() *oramMachine {
		tr, err := ringoram.NewTree(sh.treeConfig(0))
		if err != nil {
			t.Fatal(err)
		}
		return &oramMachine{id: 0, stashes: sh.opts.StashShards, tree: tr, core: sh.newTreeCore()}
	}
}

func runTreeRecorded(t *testing.T) machineRecord {
	b, keys, dir := mem.New(), kvtest.NewKeys(t), t.TempDir()
	fb := &failingReads{Backend: b, rng: rand.New(rand.NewPCG(5, 5)), rate: 0.15}
	net := NewFaultNet(Faults{Duplicate: 0.1, Late: 0.2, MaxDelay: 500 * time.Microsecond}, 5)
	o := treeRunOptions
	o.Epoch, o.TestingKnobs = 100*time.Microsecond, TestingKnobs{Transport: net, PartTimeout: 20 * time.Millisecond}
	openStore := func(fresh bool) (*store, *journal.Journal) {
		j, err := journal.Open(dir, keys, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b.Reopen()
		s, err := open(t.Context(), kv.Env{Backend: fb, Keys: keys, Capacity: 256, ValueSize: 32, Fresh: fresh, Journal: j, Options: o})
		if err != nil {
			t.Fatal(err)
		}
		return s, j
	}
	s, j := openStore(true)
	for i := range 24 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	closeAll(t, s, j)
	s, j = openStore(false)
	w := s.workers[0]
	var rec machineRecord
	var abandoned atomic.Int64
	w.mu.Lock()
	rec.initial = w.m.image()
	w.applied = func(e oramEntry, out oramOutput) {
		rec.note(t, e, out)
		if e.Kind == oramAbandon {
			abandoned.Add(1)
		}
	}
	w.mu.Unlock()
	fb.on.Store(true)
	runClients(t, s, 8, 60)
	fb.on.Store(false)
	cutOffShard(t, s, net, func() bool { return abandoned.Load() > 0 })
	// The operations whose Reads failed have ended: the store serves.
	for i := range 4 {
		if err := s.Put(t.Context(), fmt.Sprint("after", i), []byte{byte(i)}); err != nil {
			t.Fatalf("a Put once storage's Reads succeed again: %v", err)
		}
	}
	net.Settle()
	// A copy of the run's first part comes once more, long after its
	// Stash shard released it, as a copy delayed longer than the net's
	// delays would: it is refused.
	w.mu.Lock()
	first := decoded[oramEntry](t, rec.entries[slices.IndexFunc(rec.entries, func(b []byte) bool { return decoded[oramEntry](t, b).Kind == oramPart })])
	st := w.tree.Stats()
	w.mu.Unlock()
	if r := w.read(first.ID, first.Reads, nil); r.Status.Code != CodeUnavailable {
		t.Fatalf("a copy of a part released long ago got %+v, want it refused", r.Status)
	}
	if st.Reshuffles == 0 || st.Evictions == 0 {
		t.Fatalf("tree 0 reshuffled %d buckets early and evicted %d times in the run; want some of each", st.Reshuffles, st.Evictions)
	}
	closeAll(t, s, j)
	w.mu.Lock()
	rec.final = w.m.image()
	w.mu.Unlock()
	return rec
}

// cutOffShard cuts Stash shard 1 off the network while 4 clients write,
// until gaveUp reports that a tree gave up an epoch whose part from shard
// 1 never came (shard 0's requests of it fail), then heals the cut (shard
// 1's parts come late, and its requests fail).
func cutOffShard(t *testing.T, s *store, net *FaultNet, gaveUp func() bool) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
					s.Put(t.Context(), fmt.Sprint("k", (7*c+i)%32), []byte("cut"))
				}
			}
		})
	}
	net.Isolate(Endpoint{Layer: LayerStash, Index: 1})
	kvtest.WaitFor(t, "a tree to give up an epoch Stash shard 1 missed", gaveUp)
	net.Heal()
	close(stop)
	wg.Wait()
}

func closeAll(t *testing.T, s *store, j *journal.Journal) {
	t.Helper()
	if err := errors.Join(s.Close(), j.Close()); err != nil {
		t.Fatal(err)
	}
}

// runClients runs n clients of ops random operations each on s.
func runClients(t *testing.T, s *store, n, ops int) {
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 2))
			for i := range ops {
				key := "hot"
				if rng.IntN(2) == 0 {
					key = fmt.Sprint("k", rng.IntN(48)) // keys 32 to 47 are never written
				}
				switch rng.IntN(5) {
				case 0, 1:
					s.Get(t.Context(), key)
				case 2:
					if key < "k32" || key == "hot" {
						s.Put(t.Context(), key, []byte(fmt.Sprint(c, i)))
					}
				case 3:
					s.Delete(t.Context(), key)
				default:
					s.Update(t.Context(), key, kv.Mutation{Op: kv.MutAppend, Arg: []byte("+")})
				}
			}
		})
	}
	wg.Wait()
}

// TestORAMMachineReplayDeterminism: the entries a tree's machine applied
// during a run with concurrent clients, a hot key, missing keys, busy
// evictions, early reshuffles, failed metadata Reads, an epoch given
// up for a missing part, and copies of parts (delivered while the first
// is read, after it was answered, and after it was released), applied to a
// fresh machine restored from the machine's image before the first, give
// the same outputs and the same final image, byte for byte; and so do the
// rest of them applied to a fresh machine restored from the replay's
// image at 20 random points, some with an operation's Reads or its
// eviction in flight.
func TestORAMMachineReplayDeterminism(t *testing.T) {
	rec, fresh := recordTreeRun(t), freshTree(t)
	kinds, failed := map[oramEntryKind]int{}, 0
	for _, b := range rec.entries {
		e := decoded[oramEntry](t, b)
		kinds[e.Kind]++
		if (e.Kind == oramMetas || e.Kind == oramSlots) && strings.Contains(e.Failure.Detail, errInjectedRead.Error()) {
			failed++
		}
	}
	for _, k := range []oramEntryKind{oramPart, oramAbandon, oramBlocks, oramMetas, oramSlots, oramJournaled, oramEvicted} {
		if kinds[k] == 0 {
			t.Fatalf("the run applied no entry of kind %d: %v", k, kinds)
		}
	}
	if failed == 0 {
		t.Fatalf("no Read of the tree failed in the run: %v", kinds)
	}
	stored, pending, refused := partCopies(t, rec)
	if stored == 0 || pending == 0 || refused == 0 {
		t.Fatalf("copies of parts: %d answered from the record, %d waiting for the first, %d refused after release; want some of each", stored, pending, refused)
	}
	reading, evicting := 0, 0
	for _, im := range checkReplay(t, rec, func() machine { return oramMachineOf(t, fresh()) }) {
		checkEarlierImage(t, fresh, im)
		m := decoded[oramImage](t, im)
		switch {
		case len(m.Ops) == 0:
		case m.Ops[0].Step == stepMetas || m.Ops[0].Step == stepSlots || m.Ops[0].Step == stepJournal:
			reading++
		default:
			evicting++
		}
	}
	if reading == 0 || evicting == 0 {
		t.Fatalf("of 20 images, %d with Reads in flight and %d with an eviction's messages in flight; want some of each", reading, evicting)
	}
	t.Logf("%d entries (%v), %d failed Reads, copies of parts: %d stored, %d pending, %d refused; of 20 images %d reading, %d evicting",
		len(rec.entries), kinds, failed, stored, pending, refused, reading, evicting)
}

// partCopies counts what the copies of parts a tree's machine applied
// got: the stored reply, the first copy's reply once made (pending), or
// a refusal (their part was released).
func partCopies(t *testing.T, rec machineRecord) (stored, pending, refused int) {
	for _, b := range rec.outputs {
		switch cp := decoded[oramOutput](t, b).Copy; {
		case cp == nil:
		case cp.Pending:
			pending++
		case cp.Refused.Code != CodeOK:
			refused++
		default:
			stored++
		}
	}
	return stored, pending, refused
}

// TestORAMPartCopiesAfterImage: a copy of a part delivered to a tree's
// machine restored from an image taken after the part was answered gets
// the stored reply, and one delivered to a machine restored from an image
// taken after the part was released is refused (CodeUnavailable); neither
// is read again nor changes the machine.
func TestORAMPartCopiesAfterImage(t *testing.T) {
	s, err := open(t.Context(), kv.Env{Backend: mem.New(), Keys: kvtest.NewKeys(t), Capacity: 64, ValueSize: 16, Fresh: true,
		Options: Options{StashShards: 1, ORAMShards: 1, Trees: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil { // the tree is written
		t.Fatal(err)
	}
	w := s.workers[0]
	o := &ORAM{workers: map[int]*treeWorker{0: w}}
	part := func(epoch uint64) MsgID {
		return MsgID{Sender: Endpoint{LayerStash, 0}, Incarnation: 99, Epoch: epoch}
	}
	id, reads := part(1<<40), []ringoram.PathRead{{Leaf: 1}, {Leaf: 2}}
	imageAfter := func(m ReadPathsMsg) (ReadPathsReply, []byte) {
		rep := o.ReadPaths(m)
		if rep.Code != CodeOK {
			t.Fatalf("part %+v: %+v", m.ID, rep.Status)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return rep, w.m.image()
	}
	first, answered := imageAfter(ReadPathsMsg{ID: id, Reads: reads})
	_, released := imageAfter(ReadPathsMsg{ID: part(1<<40 + 1), Reads: reads, Release: []MsgID{id}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		image []byte
		want  ReadPathsReply
	}{
		{"answered", answered, first},
		{"released", released, ReadPathsReply{Status: Status{Code: CodeUnavailable, Detail: "treebeard: a copy of a message answered and released already"}}},
	} {
		tr, err := ringoram.NewTree(s.treeConfig(0))
		if err != nil {
			t.Fatal(err)
		}
		m := &oramMachine{tree: tr, core: newTreeCore(1, s.opts.A, s.opts.K)}
		if err := m.restoreImage(c.image); err != nil {
			t.Fatal(err)
		}
		out := m.apply(oramEntry{Kind: oramPart, ID: id, Reads: reads})
		if out.Copy == nil || out.hasIO() || len(out.Wait)+len(out.Ready) > 0 {
			t.Fatalf("%s: a copy of the part was handled again: copy %+v, output %+v", c.name, out.Copy, out)
		}
		if got := out.Replies; len(got) != 1 || got[0].ID != id || !reflect.DeepEqual(ReadPathsReply{Results: got[0].Results, Status: got[0].Status}, c.want) {
			t.Fatalf("%s: a copy of the part got %+v; want %+v", c.name, got, c.want)
		}
		if !bytes.Equal(m.image(), c.image) {
			t.Fatalf("%s: a copy of the part changed the machine", c.name)
		}
	}
}

// TestTreeCheckpointKeepsPartRecord: a tree's checkpoint keeps its record
// of the parts it answered: reopened from it, the tree refuses a copy of
// a part released before, and gives a copy of a part answered and not
// released its stored reply; a part it held unanswered, which the
// checkpoint does not keep, is new to it again.
func TestTreeCheckpointKeepsPartRecord(t *testing.T) {
	b := mem.New()
	l := logsStore{t: t, mem: b, b: b, keys: kvtest.NewKeys(t), dir: t.TempDir(), opts: Options{StashShards: 2, ORAMShards: 1, Trees: 1}}
	s, j := l.open(true)
	for i := range 8 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	unanswered := MsgID{Sender: Endpoint{LayerStash, 0}, Incarnation: 99, Epoch: 1 << 40}
	s.workers[0].apply(oramEntry{Kind: oramPart, ID: unanswered}) // held for Stash shard 1's part
	closeAll(t, s, j)
	var released, held []MsgID
	var replies [][]byte
	for _, st := range s.workers[0].m.msgs.image() {
		for _, run := range st.Released {
			released = append(released, MsgID{Sender: st.Stream.Sender, Incarnation: st.Stream.Incarnation, Epoch: run.From, Seq: st.Stream.Seq})
		}
		for _, h := range st.Held {
			held = append(held, MsgID{Sender: st.Stream.Sender, Incarnation: st.Stream.Incarnation, Epoch: h.Epoch, Seq: st.Stream.Seq})
			replies = append(replies, h.Reply)
		}
	}
	if len(released) == 0 || len(held) == 0 {
		t.Fatalf("the tree's record before the reopen: %d runs released, %d replies held; want some of each", len(released), len(held))
	}
	s, j = l.open(false)
	defer closeAll(t, s, j)
	w := s.workers[0]
	w.mu.Lock()
	defer w.mu.Unlock()
	if cp := w.m.msgs.admit(unanswered, kindReadPathsReply); cp != nil {
		t.Fatalf("reopened, a part held unanswered at the checkpoint was taken for a copy: %+v", cp)
	}
	for _, id := range released {
		if cp := w.m.msgs.admit(id, kindReadPathsReply); cp == nil || cp.Refused.Code != CodeUnavailable {
			t.Fatalf("reopened, a copy of released part %+v: %+v; want it refused", id, cp)
		}
	}
	for i, id := range held {
		if cp := w.m.msgs.admit(id, kindReadPathsReply); cp == nil || !bytes.Equal(cp.Reply, replies[i]) {
			t.Fatalf("reopened, a copy of answered part %+v: %+v; want its stored reply", id, cp)
		}
	}
}

// TestTreeTakeoverAsksAgain: a tree's machine restored from its image
// after any entry of a run asks, as a driver taking it over has it ask
// (outstanding), for exactly the I/O its operation in progress waits
// for, as the run's machine asked for it: the same messages to the Stash
// shards, the same metadata Read, the same slots (Treebeard Sec. 5.3.3),
// the same record and Write, the same placements; and for the Write of
// the last operation committed until a Read after it succeeded, which
// the run's driver held to send with that Read.
func TestTreeTakeoverAsksAgain(t *testing.T) {
	rec, fresh := recordTreeRun(t), freshTree(t)
	m := fresh()
	if err := m.restoreImage(rec.initial); err != nil {
		t.Fatal(err)
	}
	var asked []oramIO                   // the I/O the machine last asked for
	var unflushed []ringoram.BucketWrite // the Write last committed, until a Read succeeds
	steps, held := map[opStep]int{}, 0
	for i, b := range rec.entries {
		e, before := decoded[oramEntry](t, b), opStep(0)
		if !m.idle() {
			before = m.ops[0].Step
		}
		io := askedIO(m.apply(e))
		ok := e.Failure.Code == CodeOK
		switch {
		case e.Kind == oramJournaled && before == stepJournal && ok:
			unflushed = asked[0].Write
		case (e.Kind == oramMetas && before == stepMetas || e.Kind == oramSlots && before == stepSlots) && ok:
			unflushed = nil
		}
		if len(io) > 0 {
			asked = io
		}
		taken := fresh()
		if err := taken.restoreImage(m.image()); err != nil {
			t.Fatal(err)
		}
		var want []oramIO
		if unflushed != nil {
			want = append(want, oramIO{Write: unflushed})
			held++
		}
		if !m.idle() {
			want = append(want, asked...)
			steps[m.ops[0].Step]++
		}
		if got := askedIO(taken.outstanding()); !bytes.Equal(encoded(t, got), encoded(t, want)) {
			t.Fatalf("taken over after entry %d of %d, the machine asks for other I/O than the run's did", i, len(rec.entries))
		}
	}
	for _, st := range []opStep{stepBlocks, stepMetas, stepSlots, stepJournal, stepEvicted} {
		if steps[st] == 0 {
			t.Fatalf("no entry left an operation at step %d: %v", st, steps)
		}
	}
	if held == 0 {
		t.Fatal("no entry left a committed Write unflushed")
	}
	t.Logf("%d entries; operations in progress after them, by step: %v; %d with a committed Write unflushed", len(rec.entries), steps, held)
}

// askedIO returns the I/O out asks for: messages to the Stash shards, a
// Read (without the plan journaled before it), a Write with its record.
func askedIO(out oramOutput) []oramIO {
	var ios []oramIO
	for _, io := range out.IO {
		if io.Write == nil {
			io.Record = nil
		}
		ios = append(ios, io)
	}
	return ios
}

// checkEarlierImage checks that im, in the form an earlier build gave a
// tree's machine with at most one operation in flight (Op, no Ops),
// restores to a machine that asks for the same I/O as one restored from
// im itself, its Reads carrying the Writes held.
func checkEarlierImage(t *testing.T, fresh func() *oramMachine, im []byte) {
	t.Helper()
	old := decoded[oramImage](t, im)
	if len(old.Ops) > 1 {
		t.Fatalf("a run of one operation at a time left %d in flight", len(old.Ops))
	}
	if len(old.Ops) == 1 {
		old.Op = old.Ops[0]
	}
	old.Ops, old.Number = nil, 0
	now, earlier := fresh(), fresh()
	if err := errors.Join(now.restoreImage(im), earlier.restoreImage(encodeGob(old))); err != nil {
		t.Fatal(err)
	}
	want, got := askedIO(now.outstanding()), askedIO(earlier.outstanding())
	if len(got) != len(want) {
		t.Fatalf("restored from an earlier build's image, the machine asks for %d pieces of I/O; want %d", len(got), len(want))
	}
	for i := range got {
		if (got[i].Metas != nil || got[i].Slots != nil) && !got[i].Carry {
			t.Fatal("restored from an earlier build's image, a Read carries none of the Writes held")
		}
		got[i].Carry = want[i].Carry
	}
	if !bytes.Equal(encoded(t, got), encoded(t, want)) {
		t.Fatal("restored from an earlier build's image, the machine asks for other I/O")
	}
}
