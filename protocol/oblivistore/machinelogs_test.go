package oblivistore

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
)

// heldSync is storage whose first Sync after arm, a checkpoint's first
// storage step, tells entered and waits for release.
type heldSync struct {
	backend.Backend
	armed            chan struct{}
	entered, release chan struct{}
}

func newHeldSync(b backend.Backend) *heldSync {
	return &heldSync{Backend: b, armed: make(chan struct{}, 1), entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldSync) arm() { h.armed <- struct{}{} }

func (h *heldSync) Sync(ctx context.Context) error {
	select {
	case <-h.armed:
		close(h.entered)
		<-h.release
	default:
	}
	return backend.Sync(ctx, h.Backend)
}

// A machine's checkpoint is written while the store goes on serving:
// with one held inside, requests keep being answered (each journaled in
// the Front's and the groups' logs), and the store reopens with every
// value.
func TestCheckpointWhileServing(t *testing.T) {
	r := newCrashRig(t, 256)
	var held *heldSync
	r.wrap = func(b backend.Backend) backend.Backend {
		held = newHeldSync(b)
		return held
	}
	r.every = 30
	r.open(true)
	held.arm()
	released := false
	t.Cleanup(func() {
		if !released {
			close(held.release)
		}
	})
	// A deadline for failures only: requests wait on nothing the test
	// holds.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n := 0
	for ; ; n++ {
		if err := r.s.Put(ctx, fmt.Sprint("k", n), []byte{byte(n)}); err != nil {
			t.Fatalf("a request while a checkpoint may be under way: %v", err)
		}
		select {
		case <-held.entered:
		default:
			if n > 10_000 {
				t.Fatal("no checkpoint started in 10,000 requests")
			}
			continue
		}
		break
	}
	served := make(chan error, 1)
	go func() {
		for i := range 100 {
			if err := r.s.Put(ctx, fmt.Sprint("during", i), []byte{byte(i)}); err != nil {
				served <- err
				return
			}
		}
		served <- nil
	}()
	if err := <-served; err != nil {
		t.Fatalf("requests while a machine's checkpoint is held: %v", err)
	}
	close(held.release)
	released = true
	r.close()
	r.open(false)
	defer r.close()
	for i := range n + 1 {
		if v, ok, err := r.s.Get(ctx, fmt.Sprint("k", i)); err != nil || !ok || !bytes.Equal(v, []byte{byte(i)}) {
			t.Fatalf("Get(k%d) after the reopen = %v, %v, %v", i, v, ok, err)
		}
	}
	for i := range 100 {
		if v, ok, err := r.s.Get(ctx, fmt.Sprint("during", i)); err != nil || !ok || !bytes.Equal(v, []byte{byte(i)}) {
			t.Fatalf("Get(during%d) after the reopen = %v, %v, %v", i, v, ok, err)
		}
	}
}

// A store whose machines checkpointed at positions of their own, often,
// recovers, machine for machine, the very state a store that never
// checkpointed recovers from the same entries.
func TestCheckpointPositionsRecoverAlike(t *testing.T) {
	seed := [32]byte{7}
	rigs := []*crashRig{newCrashRig(t, 256), newCrashRig(t, 256)}
	rigs[0].every, rigs[1].every = 1<<40, 7
	for _, r := range rigs {
		r.options = Options{TestingKnobs: TestingKnobs{Seed: &seed, SerialIO: true}}
		r.open(true)
		for i := range 120 {
			k := fmt.Sprint("k", i%40)
			var err error
			if i%3 == 2 {
				_, _, err = r.s.Get(t.Context(), k)
			} else {
				err = r.s.Put(t.Context(), k, fmt.Append(nil, i))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if cps := r.j.Stats().Checkpoints; r.every < 100 && cps < 10 {
			t.Fatalf("%d machine checkpoints in 120 requests at every %d records", cps, r.every)
		}
		r.kill()
		r.bury()
		r.open(false)
	}
	for _, n := range rigs[0].s.logs.nodes() {
		var states [2][]byte
		for i, r := range rigs {
			r.s.onLoop(func() { states[i], _ = r.s.core.snapshotOf(n) })
		}
		if !bytes.Equal(states[0], states[1]) {
			t.Errorf("machine %d recovered from its checkpoints differs from machine %d recovered from its entries alone", machineOf(n), machineOf(n))
		}
	}
	for _, r := range rigs {
		r.close()
	}
}

// A machine's log holds its entries alone, and another machine refuses
// them (a reseed, alike for all, aside): the Front's requests and the
// groups' messages are not a group's entries, and a group's messages
// name it.
func TestEntriesStayWithTheirMachine(t *testing.T) {
	r := newCrashRig(t, 256)
	r.options = Options{Groups: 2}
	r.open(true)
	for i := range 20 {
		if err := r.s.Put(t.Context(), fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	r.kill()
	r.bury()
	r.base.Reopen()
	j, err := journal.Open(r.dir, r.keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	logs := map[durable.MachineID]*recorded{machineOf(FrontNode): {}, machineOf(0): {}, machineOf(1): {}}
	machines := map[durable.MachineID]durable.Machine{}
	for m, rc := range logs {
		machines[m] = rc
	}
	if _, err := durable.New(j, r.base, r.keys).ReplayMachines(t.Context(), machines); err != nil {
		t.Fatal(err)
	}
	front, group0, group1 := logs[machineOf(FrontNode)], logs[machineOf(0)], logs[machineOf(1)]
	if len(front.records) == 0 || len(group0.records) == 0 || len(group1.records) == 0 {
		t.Fatalf("entries per machine: Front %d, group 0 %d, group 1 %d; want some of each",
			len(front.records), len(group0.records), len(group1.records))
	}
	// Group 1's entries applied to group 0, the Front's to a group.
	g0 := groupReplay()
	if err := g0.Restore(group0.state); err != nil {
		t.Fatal(err)
	}
	if err := applyAll(g0, group1.records); err == nil || !strings.Contains(err.Error(), "group 0 was sent a message for group 1") {
		t.Errorf("group 1's entries applied to group 0: %v; want a refusal", err)
	}
	if err := applyAll(g0, front.records); err == nil {
		t.Error("the Front's entries applied to group 0 were taken")
	}
	f := frontReplay()
	if err := f.Restore(front.state); err != nil {
		t.Fatal(err)
	}
	if err := applyAll(f, group0.records); err == nil {
		t.Error("group 0's entries applied to the Front were taken")
	}
}

// applyAll applies records to m until one fails.
func applyAll(m durable.Machine, records [][]byte) error {
	for i, b := range records {
		if err := m.Apply(b); err != nil {
			return fmt.Errorf("entry %d: %w", i+1, err)
		}
	}
	return nil
}

// driveAsEarlierBuild drives a new store as an earlier build did, into
// r's journal and storage: the whole core one machine (machine 0), its
// checkpoint the core's snapshot at creation and its records the core's
// inputs, each journaled before its outputs leave. It puts keys
// k0..k<n-1>, then crashes.
func driveAsEarlierBuild(t *testing.T, r *crashRig, n int) {
	t.Helper()
	ctx := t.Context()
	j, err := journal.Open(r.dir, r.keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Crash()
	r.base.Reopen()
	opts, err := kv.ResolveOptions[Options]("oblivistore", kv.Env{Capacity: r.n, ValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	opts.valueSize = 16
	s := &store{b: r.base, keys: r.keys, valueSize: 16, opts: opts, log: durable.New(j, r.base, r.keys),
		core: NewCore(r.n, opts, [32]byte{3}), incarnation: 1}
	if err := s.claimFences(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := s.core.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.log.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	inputs := []Input{{Reseed: &Reseed{Seed: [32]byte{4}, Incarnation: 1}}}
	for i := range n {
		inputs = append(inputs, Input{Request: &Request{Op: OpPut, Key: fmt.Sprint("k", i), Val: []byte{byte(i)}}})
	}
	for len(inputs) > 0 {
		in := inputs[0]
		inputs = inputs[1:]
		if _, err := s.log.Commit(appendInput(nil, in)); err != nil {
			t.Fatal(err)
		}
		outs, err := s.core.Step(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			switch {
			case o.Read != nil:
				blocks, err := s.read(ctx, o.Read)
				if err != nil {
					t.Fatal(err)
				}
				inputs = append(inputs, Input{Read: &ReadDone{Group: o.Read.Group, ID: o.Read.ID, Blocks: blocks}})
			case o.Write != nil:
				if err := s.write(ctx, o.Write); err != nil {
					t.Fatal(err)
				}
				inputs = append(inputs, Input{Write: &WriteDone{Group: o.Write.Group, ID: o.Write.ID}})
			}
		}
	}
}

// A store an earlier build journaled (its whole core as machine 0)
// opens: it is recovered from machine 0's checkpoint and inputs, then
// journaled machine by machine, and opens again from its machines' logs
// alone.
func TestEarlierBuildStoreOpens(t *testing.T) {
	r := newCrashRig(t, 256)
	const n = 30
	driveAsEarlierBuild(t, r, n)
	check := func(when string) {
		t.Helper()
		for i := range n {
			if v, ok, err := r.s.Get(t.Context(), fmt.Sprint("k", i)); err != nil || !ok || !bytes.Equal(v, []byte{byte(i)}) {
				t.Fatalf("%s: Get(k%d) = %v, %v, %v", when, i, v, ok, err)
			}
		}
	}
	r.open(false)
	check("opened from an earlier build's journal")
	if err := r.s.Put(t.Context(), "after", []byte("x")); err != nil {
		t.Fatal(err)
	}
	r.kill()
	r.bury()
	r.open(false)
	check("reopened from the machines' logs")
	if v, _, err := r.s.Get(t.Context(), "after"); err != nil || string(v) != "x" {
		t.Fatalf("Get(after) = %q, %v", v, err)
	}
	cps := r.s.log.Checkpointed()
	if st, ok := cps[legacyMachine]; !ok || len(st) != 0 {
		t.Errorf("machine 0 is not retired: checkpoint of %d bytes (held: %v)", len(st), ok)
	}
	for _, node := range r.s.logs.nodes() {
		if len(cps[machineOf(node)]) == 0 {
			t.Errorf("machine %d has no checkpoint of its own", machineOf(node))
		}
	}
	r.close()
}

// cutJournal is a journal that dies as its at-th record is appended
// (never, at 0): the records before it are durable, it and every later
// one lost, as a crash in the middle of a step leaves them (the sender's
// entry kept, its message's entry in the receiver's log lost). at is set
// and read on the store's loop, which alone appends.
type cutJournal struct {
	*journal.Journal
	at uint64
}

func (c *cutJournal) Append(m durable.MachineID, data []byte) uint64 {
	if c.Journal.Last()+1 == c.at {
		c.Journal.Sync(c.at - 1)
		c.Journal.Crash()
	}
	return c.Journal.Append(m, data)
}

// A crash in the middle of a step keeps some machines' entries and loses
// the rest: recovery delivers the messages whose entries the receivers'
// logs lost, and every acknowledged write reads back.
func TestCrashMidStep(t *testing.T) {
	r := newCrashRig(t, 256)
	var log observe.MemoryLog
	r.wrap = func(b backend.Backend) backend.Backend { return observe.NewTap(b, &log) }
	r.every = 50
	var cut *cutJournal
	r.cut = func(j *journal.Journal) durable.Journal {
		cut = &cutJournal{Journal: j}
		return cut
	}
	r.open(true)
	rng := rand.New(rand.NewPCG(5, 5))
	acked := map[string]string{}
	delivered := 0
	for round := range 12 {
		at := 2 + rng.Uint64N(60)
		r.s.onLoop(func() { cut.at = cut.Last() + at })
		var cutKey, cutVal string
		for i := 0; ; i++ {
			k, v := fmt.Sprint("k", rng.IntN(20)), fmt.Sprint(round, ".", i)
			if err := r.s.Put(t.Context(), k, []byte(v)); err != nil {
				cutKey, cutVal = k, v
				break
			}
			acked[k] = v
		}
		r.bury()
		r.base.Reopen()
		plan := planRecovery(t, r.dir, r.keys, r.base)
		delivered += plan.delivered
		before := len(log.Records())
		r.open(false)
		if _, err := checkRecoveryCalls(log.Records()[before:], plan, nil); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for k, v := range acked {
			got, _, err := r.s.Get(t.Context(), k)
			if err != nil || string(got) != v && (k != cutKey || string(got) != cutVal) {
				t.Fatalf("round %d: Get(%s) = %q, %v; want %q", round, k, got, err, v)
			}
			acked[k] = string(got)
		}
	}
	if delivered == 0 {
		t.Error("no crash kept a message's entry from its receiver's log")
	}
	t.Logf("recoveries delivered %d entries of messages", delivered)
	r.close()
}

// appendedJournal is a journal that keeps the records appended to it.
type appendedJournal struct {
	durable.Journal
	records []durable.Record
}

func (j *appendedJournal) Append(m durable.MachineID, data []byte) uint64 {
	j.records = append(j.records, durable.Record{LSN: uint64(len(j.records) + 1), Machine: m, Data: data})
	return uint64(len(j.records))
}

// TestStepsShareRecords: a machine's entries of successive steps are one
// record until another machine's record comes between, or a flush; each
// machine's entries keep their order.
func TestStepsShareRecords(t *testing.T) {
	j := &appendedJournal{}
	logs := newMachineLogs(durable.New(j, nil, nil), 1)
	entry := func(m Node, e string) Applied { return Applied{m, []byte(e)} }
	for _, step := range [][]Applied{
		{entry(0, "a")},
		{entry(0, "b"), entry(FrontNode, "c"), entry(0, "d")},
		{entry(FrontNode, "e")},
		{entry(0, "f")},
	} {
		logs.append(step)
	}
	if lsn := logs.flush(); lsn != 3 {
		t.Errorf("flush returned LSN %d; want 3", lsn)
	}
	var got []string
	for _, r := range j.records {
		d := delta.NewDecoder(r.Data)
		entries, err := splitEntries(d.Bytes(math.MaxInt))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s", r.Machine, bytes.Join(entries, nil)))
	}
	want := []string{"2:abd", "1:ce", "2:f"}
	if !slices.Equal(got, want) {
		t.Errorf("records (machine:entries) %v; want %v", got, want)
	}
}
