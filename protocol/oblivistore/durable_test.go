package oblivistore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/seal"
)

// crashRig is a store on memory storage whose journal a test holds, so it
// can kill the store as a process death would and open it again.
type crashRig struct {
	t    *testing.T
	base *kvtest.Volatile
	keys *seal.Keys
	dir  string
	n    int
	// wrap, if set, wraps the storage of each open (a Tap, a cutter).
	wrap func(backend.Backend) backend.Backend
	// every, if set, is the checkpoint spacing in each machine's journal
	// records.
	every uint64
	// options, if set, are the store's Options.
	options any
	// cut, if set, wraps the journal of each open.
	cut func(*journal.Journal) durable.Journal
	s   *store
	j   *journal.Journal
}

func newCrashRig(t *testing.T, n int) *crashRig {
	return &crashRig{t: t, base: kvtest.NewVolatile(), keys: kvtest.NewKeys(t), dir: t.TempDir(), n: n}
}

func (r *crashRig) open(fresh bool) {
	r.t.Helper()
	j, err := journal.Open(r.dir, r.keys, journal.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.base.Reopen()
	var b backend.Backend = r.base
	if r.wrap != nil {
		b = r.wrap(b)
	}
	var dj durable.Journal = j
	if r.cut != nil {
		dj = r.cut(j)
	}
	s, err := open(r.t.Context(), kv.Env{Backend: b, Keys: r.keys, Capacity: r.n, ValueSize: 16, Fresh: fresh, Journal: dj, Options: r.options})
	if err != nil {
		j.Crash()
		r.t.Fatalf("opening (fresh %v): %v", fresh, err)
	}
	if r.every > 0 {
		s.onLoop(func() { s.log.SetEvery(r.every) })
	}
	r.s, r.j = s, j
}

// kill makes the journal take nothing more, from the loop, at a moment
// no checkpoint is being written: the records synced so far survive, and
// those of the batch under way are mostly lost before its outputs leave.
// Not always: the batch appends its records to the journal as it goes,
// and a checkpoint that ended before the kill may have written them
// (journal.Checkpoint flushes what is pending), so the last records may
// survive with outputs never let out, as a crash between a group commit
// and the outputs' release leaves them; recovery then issues those for
// the first time (checkRecoveryCalls). Every call in flight then fails,
// since the store cannot journal an input.
func (r *crashRig) kill() {
	kvtest.WaitFor(r.t, "a kill with no checkpoint under way", func() bool { return r.killIf(func() bool { return true }) })
}

// killIf kills the store as kill does if cond holds on the loop, and
// reports whether it did (a store whose loop has ended is killed anyway).
// Checked on the loop, cond cannot be undone by a checkpoint before the
// kill.
func (r *crashRig) killIf(cond func() bool) bool {
	killed := false
	if r.s.onLoop(func() {
		if killed = cond() && r.s.logs.settled(); killed {
			r.j.Crash()
		}
	}) != nil {
		r.j.Crash()
		return true
	}
	return killed
}

// bury winds the killed store down: its goroutines end, its backend calls
// in flight finish (storage keeps what they did), and it saves nothing.
// No client may be calling it.
func (r *crashRig) bury() {
	r.s.Close() // fails: the journal is gone
}

func (r *crashRig) close() {
	r.t.Helper()
	if err := errors.Join(r.s.Close(), r.j.Close()); err != nil {
		r.t.Fatal(err)
	}
}

// cutter is storage that dies at its at-th call of a slot (from 1; or
// at-th Write of slots): a Write then lands only its first half, a Read
// does nothing, and every call from then on, of slots or the anchor,
// fails as if the process were gone (backend.ErrClosed, which the store
// does not retry).
type cutter struct {
	backend.Backend
	at     int64
	writes atomic.Bool // count Writes only
	calls  atomic.Int64
	dead   atomic.Bool
	died   chan struct{}
	total  atomic.Int64 // items of the Write cut in half
}

func newCutter(b backend.Backend) *cutter {
	return &cutter{Backend: b, died: make(chan struct{})}
}

// arm makes the at-th slot call (or slot Write, with writes) from now on
// the last.
func (c *cutter) arm(at int64, writes bool) {
	c.calls.Store(0)
	c.writes.Store(writes)
	atomic.StoreInt64(&c.at, at)
}

// cut reports whether the call fails; first is its first address.
func (c *cutter) cut(first string, items []backend.Item) (bool, error) {
	if c.dead.Load() {
		return true, nil
	}
	if !strings.HasPrefix(first, SlotPrefix) || items == nil && c.writes.Load() || c.calls.Add(1) != atomic.LoadInt64(&c.at) {
		return false, nil
	}
	var err error
	if len(items) > 0 {
		half := items[:len(items)/2]
		c.total.Store(int64(len(items)))
		if len(half) > 0 {
			err = c.Backend.Write(context.Background(), half)
		}
	}
	c.dead.Store(true)
	close(c.died)
	return true, err
}

func (c *cutter) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if dead, err := c.cut(addrs[0], nil); dead || err != nil {
		return nil, errors.Join(backend.ErrClosed, err)
	}
	return c.Backend.Read(ctx, addrs)
}

func (c *cutter) Write(ctx context.Context, items []backend.Item) error {
	if dead, err := c.cut(items[0].Addr, items); dead || err != nil {
		return errors.Join(backend.ErrClosed, err)
	}
	return c.Backend.Write(ctx, items)
}

// WriteFenced is cut as Write is; a claim of the fence alone (no item)
// only fails once storage is dead.
func (c *cutter) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if len(items) == 0 && c.dead.Load() {
		return backend.ErrClosed
	}
	if len(items) == 0 {
		return c.Backend.WriteFenced(ctx, f, nil)
	}
	if dead, err := c.cut(items[0].Addr, items); dead || err != nil {
		return errors.Join(backend.ErrClosed, err)
	}
	return c.Backend.WriteFenced(ctx, f, items)
}

// Sync forwards to storage (a checkpoint's sync), unless it is dead.
func (c *cutter) Sync(ctx context.Context) error {
	if c.dead.Load() {
		return backend.ErrClosed
	}
	return backend.Sync(ctx, c.Backend)
}

func (c *cutter) DeferSync() bool { return backend.DeferSync(c.Backend) }

// recoveryPlan is what a recovery from the journal in its present state
// must do, derived here as store.recover does: the writes it redoes, in
// order, and the reads it issues again.
type recoveryPlan struct {
	groups int // whose fences recovery claims first, in order
	// delivered counts the entries of messages a crash kept from their
	// receivers, delivered by the recovery.
	delivered int
	redo      []*WriteIO
	// installed[i]: redo[i] had completed and the core had installed its
	// levels before the crash (its completion was journaled).
	installed []bool
	reads     []*ReadIO
	// readAt and writeAt give the journal position of the record that
	// issued each read and write of redo and reads: the checkpoint's for
	// one outstanding at it, math.MaxUint64 for one the delivery issued.
	readAt, writeAt map[ioKey]uint64
	// replayed are the reads the checkpoints left outstanding and those
	// the records replayed issued, each with its record's position.
	replayed []issuedRead
}

// issuedRead is a read a record issued: its slots' addresses, and the
// record's journal position.
type issuedRead struct {
	addrs []string
	at    uint64
}

// issued notes the I/O the record at position at issued.
func (p *recoveryPlan) issued(at uint64, rd *ReadIO, w *WriteIO, replayed bool) {
	switch {
	case rd != nil:
		p.readAt[ioKey{rd.Group, rd.ID}] = at
		if replayed {
			p.replayed = append(p.replayed, issuedRead{slotAddrs(rd.Slots), at})
		}
	case w != nil:
		p.writeAt[ioKey{w.Group, w.ID}] = at
	}
}

// keptRecovery is a journal that hands over what it held when opened
// as the journal did, keeping it for the test too.
type keptRecovery struct {
	durable.Journal
	rec durable.Recovery
}

func (k *keptRecovery) Recovered() durable.Recovery { return k.rec }

// planRecovery reads the journal in dir (and the anchor from b, which
// sees nothing else) and replays each machine's log on machines of its
// own, then delivers the messages a crash kept from their receivers.
func planRecovery(t *testing.T, dir string, keys *seal.Keys, b backend.Backend) recoveryPlan {
	t.Helper()
	j, err := journal.Open(dir, keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	kept := &keptRecovery{Journal: j, rec: j.Recovered()}
	log := durable.New(kept, b, keys)
	recs := map[durable.MachineID]durable.Machine{}
	for m := range log.Checkpointed() {
		recs[m] = &recorded{}
	}
	if _, err := log.ReplayMachines(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	front := frontReplay()
	rf := recs[machineOf(FrontNode)].(*recorded)
	if err := front.Restore(rf.state); err != nil {
		t.Fatal(err)
	}
	if err := applyAll(front, rf.records); err != nil {
		t.Fatalf("replaying the Front's records: %v", err)
	}
	var toGroups []ToGroup
	for _, o := range front.outs {
		if o.Msg != nil {
			toGroups = append(toGroups, *o.Msg)
		}
	}
	redo := map[ioKey]*WriteIO{}
	keep := func(w *WriteIO) {
		if w != nil {
			redo[ioKey{w.Group, w.ID}] = w
		}
	}
	p := recoveryPlan{readAt: map[ioKey]uint64{}, writeAt: map[ioKey]uint64{}}
	lsns := map[durable.MachineID][]uint64{}
	for _, r := range kept.rec.Records {
		lsns[r.Machine] = append(lsns[r.Machine], r.LSN)
	}
	var groups []*GroupMachine
	var toFront []ToFront
	for g := 0; recs[machineOf(Node(g))] != nil; g++ {
		m := machineOf(Node(g))
		rg := recs[m].(*recorded)
		gr := groupReplay()
		if err := gr.Restore(rg.state); err != nil {
			t.Fatal(err)
		}
		for _, o := range gr.outs {
			p.issued(kept.rec.Checkpoints[m].At, o.Read, o.Write, true)
		}
		for i, rec := range rg.records {
			n := len(gr.outs)
			if err := gr.Apply(rec); err != nil {
				t.Fatalf("replaying group %d's record %d: %v", g, i+1, err)
			}
			for _, o := range gr.outs[n:] {
				p.issued(lsns[m][i], o.Read, o.Write, true)
			}
		}
		for _, o := range gr.outs { // its writes outstanding at the checkpoint, then its entries' outputs
			keep(o.Write)
			if o.Msg != nil {
				toFront = append(toFront, *o.Msg)
			}
		}
		groups = append(groups, gr.m)
	}
	c, err := assemble(front.m, groups)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := c.Deliver(toGroups, toFront)
	if err != nil {
		t.Fatal(err)
	}
	// The logs hold no acknowledgement alone: the delivery acknowledges
	// what each receiver has, as the steps the crash cut short would have.
	for g, gm := range c.groups {
		if f, o := len(c.front.st.Out[g].Unacked), len(gm.st.Out.Unacked); f+o > 0 {
			t.Fatalf("after the delivery, %d messages to group %d and %d from it are unacknowledged", f, g, o)
		}
	}
	for _, o := range outs {
		keep(o.Write)
		p.issued(math.MaxUint64, o.Read, o.Write, false)
	}
	p.groups, p.delivered = c.Groups(), len(c.Entries())
	pending := map[ioKey]bool{}
	for _, o := range c.Outstanding() {
		if o.Write != nil {
			keep(o.Write)
			pending[ioKey{o.Write.Group, o.Write.ID}] = true
		} else {
			p.reads = append(p.reads, o.Read)
		}
	}
	p.redo = sortedWrites(redo)
	for _, w := range p.redo {
		p.installed = append(p.installed, !pending[ioKey{w.Group, w.ID}])
	}
	return p
}

// recorded is a durable.Machine that only keeps the checkpoint and the
// records after it, for planRecovery to replay on its own.
type recorded struct {
	state   []byte
	records [][]byte
}

func (r *recorded) Restore(snapshot []byte) error { r.state = snapshot; return nil }
func (r *recorded) Apply(record []byte) error     { r.records = append(r.records, record); return nil }
func (r *recorded) Snapshot() ([]byte, error)     { return r.state, nil }

// slotAddrs returns the storage addresses of slots.
func slotAddrs(slots []Slot) []string {
	out := make([]string, len(slots))
	for i, s := range slots {
		out[i] = slotAddr(s)
	}
	return out
}

func isSlotCall(r observe.Record) bool {
	return len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], SlotPrefix)
}

// slotLedger follows storage's view of the slots through a Tap's log and
// checks that no slot is read twice between two writes of it but by the
// very same Read again (the same addresses in the same order, as a
// recovery reissues a Read): storage learns from the reads only how many
// there were of each level since it was written. A recovery's redone
// Write of levels the core had installed before the crash writes again
// what storage held: it starts nothing new, so the reads made before it
// still count.
type slotLedger struct {
	readBy map[string]string // address -> the Read (its addresses) that read it since it was written
}

func (l *slotLedger) write(addrs []string) {
	for _, a := range addrs {
		delete(l.readBy, a)
	}
}

func (l *slotLedger) read(r observe.Record) error {
	if l.readBy == nil {
		l.readBy = map[string]string{}
	}
	key := strings.Join(r.Addrs, " ")
	for _, a := range r.Addrs {
		if prev, ok := l.readBy[a]; ok && prev != key {
			return fmt.Errorf("call %d reads slot %s, which a Read of other slots read since it was last written", r.Seq, a)
		}
		l.readBy[a] = key
	}
	return nil
}

// feed runs the slot calls of recs through the ledger; redone[i] marks
// recs[i] as a recovery's Write of installed levels.
func (l *slotLedger) feed(recs []observe.Record, redone map[int]bool) error {
	for i, r := range recs {
		if !isSlotCall(r) || r.Err {
			continue
		}
		switch r.Op {
		case observe.OpWrite:
			if !redone[i] {
				l.write(r.Addrs)
			}
		case observe.OpRead:
			if err := l.read(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRecoveryCalls checks a recovery's calls (recs, from its first)
// against its plan: the anchor read, then exactly the planned Writes in
// order, then among the rest the planned Reads, each whole. When seen
// (what storage saw before the crash) is set, every Write redone and every
// Read reissued must be one storage saw before, address for address, or
// else one the crash kept from storage after the journal held it: issued
// by a record after the last one some read of which storage saw (the
// batch the kill cut short, whose records a checkpoint wrote; kill). Such
// a call is the one the protocol had decided, first seen now; a recovery
// that chose a call afresh instead of the one storage saw fails. It
// returns the index in recs of each redone Write of installed levels.
// The fences of the groups are claimed first, between the anchor read
// and the Writes.
func checkRecoveryCalls(recs []observe.Record, p recoveryPlan, seen []observe.Record) (map[int]bool, error) {
	if len(recs) == 0 || recs[0].Op != observe.OpRead || !slices.Equal(recs[0].Addrs, []string{durable.AnchorAddr}) {
		return nil, errors.New("recovery does not start with the anchor's read")
	}
	saw := map[string]bool{}
	for _, r := range seen {
		if isSlotCall(r) && !r.Err {
			saw[fmt.Sprint(r.Op, r.Addrs)] = true
		}
	}
	// last is the last record some read of which storage saw: the Read
	// of its slots storage saw since it last wrote them (a slot is read
	// once between two writes, so no earlier Read of the same slots
	// passes for it).
	var since slotLedger
	for _, r := range seen {
		switch {
		case !isSlotCall(r) || r.Err:
		case r.Op == observe.OpWrite:
			since.write(r.Addrs)
		case r.Op == observe.OpRead:
			_ = since.read(r) // slotLedger's own check is TestCrashRecovers'
		}
	}
	var last uint64
	for _, rd := range p.replayed {
		if len(rd.addrs) > 0 && since.readBy[rd.addrs[0]] == strings.Join(rd.addrs, " ") {
			last = max(last, rd.at)
		}
	}
	redone := map[int]bool{}
	rest := recs[1:]
	for g := range p.groups {
		if len(rest) == 0 || rest[0].Op != observe.OpWrite || len(rest[0].Addrs) != 0 || rest[0].Fence != FencePrefix+strconv.Itoa(g) {
			return nil, fmt.Errorf("recovery's call %d is not the claim of group %d's fence", 2+g, g)
		}
		rest = rest[1:]
	}
	for i, w := range p.redo {
		if i >= len(rest) || rest[i].Op != observe.OpWrite || !slices.Equal(rest[i].Addrs, slotAddrs(w.Slots)) {
			return nil, fmt.Errorf("recovery's call %d is not the redo of write %d (%d slots)", i+2+p.groups, w.ID, len(w.Slots))
		}
		if at := p.writeAt[ioKey{w.Group, w.ID}]; seen != nil && !saw[fmt.Sprint(observe.OpWrite, rest[i].Addrs)] && at <= last {
			return nil, fmt.Errorf("recovery redoes write %d of %d slots, which storage never saw, though it saw a read of record %d, at or after this write's %d",
				w.ID, len(w.Slots), last, at)
		}
		if p.installed[i] {
			redone[1+p.groups+i] = true
		}
	}
	rest = rest[len(p.redo):]
	for _, rd := range p.reads {
		addrs := slotAddrs(rd.Slots)
		if !slices.ContainsFunc(rest, func(r observe.Record) bool { return r.Op == observe.OpRead && slices.Equal(r.Addrs, addrs) }) {
			return nil, fmt.Errorf("recovery does not reissue read %d of %d slots", rd.ID, len(rd.Slots))
		}
		if at := p.readAt[ioKey{rd.Group, rd.ID}]; seen != nil && !saw[fmt.Sprint(observe.OpRead, addrs)] && at <= last {
			return nil, fmt.Errorf("recovery reissues read %d of %d slots, which storage never saw, though it saw a read of record %d, at or after this read's %d",
				rd.ID, len(rd.Slots), last, at)
		}
	}
	return redone, nil
}

// outcome is what a key may hold after a crash: its last acknowledged
// write, or the write the crash cut off ("" deleted).
type outcome struct{ acked, cut string }

// crashWorkload runs clients on r's store until stop is closed or a call
// fails. Client c writes (puts, and deletes) and reads its own keys
// c<c>.0..3, reads the others' and, 30% of its calls, the hot key, which
// client 0 writes. It records each write's outcome; a Get must return a
// value written to its key, and its writer's Get the last it wrote.
func crashWorkload(t *testing.T, r *crashRig, round, clients, own int, outcomes map[string]*outcome,
	stop chan struct{}, acked *atomic.Int64, bad *atomic.Pointer[string]) *sync.WaitGroup {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			cr := rand.New(rand.NewPCG(uint64(round), uint64(c)))
			for v := 1; ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				var k string
				switch p := cr.IntN(10); {
				case p < 3:
					k = "hot"
				case p < 8:
					k = fmt.Sprint("c", c, ".", cr.IntN(own))
				default:
					k = fmt.Sprint("c", cr.IntN(clients), ".", cr.IntN(own))
				}
				o, mine := outcomes[k], k == "hot" && c == 0 || strings.HasPrefix(k, fmt.Sprint("c", c, "."))
				val := fmt.Sprint(k, "=", round, ".", v)
				var err error
				switch p := cr.IntN(10); {
				case mine && p < 5:
					o.cut = val
					err = r.s.Put(t.Context(), k, []byte(val))
				case mine && p < 6 && k != "hot":
					o.cut, val = "", ""
					err = r.s.Delete(t.Context(), k)
				default:
					got, ok, err := r.s.Get(t.Context(), k)
					var msg string
					switch {
					case err != nil:
						return
					case ok && !strings.HasPrefix(string(got), k+"="):
						msg = fmt.Sprintf("round %d: Get(%s) = %q, never written to it", round, k, got)
					case mine && (string(got) != o.acked || ok != (o.acked != "")):
						msg = fmt.Sprintf("round %d: Get(%s) by its writer = %q, %v; want %q", round, k, got, ok, o.acked)
					default:
						continue
					}
					bad.CompareAndSwap(nil, &msg)
					return
				}
				if err != nil {
					return // cut off by the crash: o.cut may or may not have taken effect
				}
				o.acked = val
				acked.Add(1)
			}
		})
	}
	return &wg
}

// The ways TestCrashRecovers kills the store.
const (
	crashJournal = iota // the journal stops between two batches, storage alive
	crashStorage        // storage dies in a call (a Write lands half), then the journal stops
	crashPower          // the journal stops, then storage loses every write since its last sync
	crashKinds
)

// TestCrashRecovers: 8 clients work on a bulk-loaded store of capacity
// 256 (checkpoints every 40 inputs) while it is killed 18 times, in turn:
// its journal stops between two batches with storage alive; storage dies
// at a random slot call, every other time a Write (landing only its first
// half), and the journal stops right after; or the journal stops and then
// the power goes,
// storage (kvtest.Volatile, synced only at checkpoints) losing every
// write since the last checkpoint. Each client owns four keys (puts,
// deletes, gets) and gets keys of others, and a hot key, written by
// client 0, is read by all (crashWorkload). After each reopening every
// key reads back as its last acknowledged write left it, or as the one
// write the crash cut off did; no Get ever returns a value not written to
// its key.
//
// Storage's view, from a Tap under the store: each recovery reads the
// anchor, redoes exactly the writes the journal determines (derived apart
// by planRecovery), in order, and reissues exactly the reads left
// outstanding; when storage was alive at the crash, each of those is a
// Write or Read storage already saw, address for address, or one of the
// last records, which the crash kept from storage after the journal held
// them (checkRecoveryCalls). Over the whole
// run, no slot is read twice between two writes of it but by the same
// Read reissued (slotLedger).
func TestCrashRecovers(t *testing.T) {
	const clients, own, rounds = 8, 4, 6 * crashKinds
	r := newCrashRig(t, 256)
	var log observe.MemoryLog
	var cut *cutter // the storage of the store open: a cutter over a Tap
	r.wrap = func(b backend.Backend) backend.Backend {
		cut = newCutter(observe.NewTap(b, &log))
		return cut
	}
	r.every = 160
	r.open(true)
	backend.DeferSync(r.base)
	outcomes := map[string]*outcome{"hot": {acked: "hot=v0", cut: "hot=v0"}}
	items := map[string][]byte{"hot": []byte("hot=v0")}
	for c := range clients {
		for i := range own {
			k := fmt.Sprint("c", c, ".", i)
			outcomes[k] = &outcome{acked: k + "=v0", cut: k + "=v0"}
			items[k] = []byte(k + "=v0")
		}
	}
	for i := range 150 { // keys nobody writes, so the levels are not sparse
		k := fmt.Sprint("cold", i)
		outcomes[k] = &outcome{acked: k + "=v0", cut: k + "=v0"}
		items[k] = []byte(k + "=v0")
	}
	if _, err := r.s.Load(t.Context(), maps.All(items)); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	var ledger slotLedger
	var acked atomic.Int64
	var bad atomic.Pointer[string]
	torn, lost := 0, 0
	fed := 0 // log records the ledger has seen
	for round := range rounds {
		kind := round % crashKinds
		if kind == crashStorage {
			if round/crashKinds%2 == 0 {
				cut.arm(1+rng.Int64N(400), false)
			} else {
				cut.arm(1+rng.Int64N(20), true)
			}
		}
		stop := make(chan struct{})
		wg := crashWorkload(t, r, round, clients, own, outcomes, stop, &acked, &bad)
		if kind == crashStorage {
			select {
			case <-cut.died:
			case <-time.After(30 * time.Second):
				t.Fatalf("round %d: storage was never called %d times", round, cut.at)
			}
			if cut.total.Load() > 0 {
				torn++
			}
		} else {
			target := acked.Load() + 5 + rng.Int64N(60)
			kvtest.WaitFor(t, "acknowledged writes", func() bool { return acked.Load() >= target || bad.Load() != nil })
		}
		if kind == crashPower {
			// A power cut must find writes storage has not synced, or it
			// tests nothing.
			kvtest.WaitFor(t, "a kill with writes storage has not synced", func() bool {
				return r.killIf(func() bool { return r.base.Unsynced() > 0 })
			})
		} else {
			r.kill()
		}
		close(stop)
		wg.Wait()
		r.bury()
		if msg := bad.Load(); msg != nil {
			t.Fatal(*msg)
		}
		if kind == crashPower {
			n, err := r.base.PowerLoss(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			lost += n
		}
		before := len(log.Records())
		r.base.Reopen()
		plan := planRecovery(t, r.dir, r.keys, r.base)
		r.open(false)
		recs := log.Records()
		var seen []observe.Record
		if kind != crashStorage {
			seen = recs[:before]
		}
		redone, err := checkRecoveryCalls(recs[before:], plan, seen)
		if err != nil {
			t.Fatalf("round %d (crash kind %d): %v", round, kind, err)
		}
		if err := ledger.feed(recs[fed:before], nil); err != nil {
			t.Fatalf("round %d, before the crash: %v", round, err)
		}
		for k, o := range outcomes {
			got, ok, err := r.s.Get(t.Context(), k)
			if err != nil || (string(got) != o.acked || ok != (o.acked != "")) && (string(got) != o.cut || ok != (o.cut != "")) {
				t.Fatalf("round %d (crash kind %d): after the crash Get(%q) = %q, %v, %v; want %q (or %q, cut off)",
					round, kind, k, got, ok, err, o.acked, o.cut)
			}
			if ok {
				o.acked = string(got)
			} else {
				o.acked = ""
			}
			o.cut = o.acked
		}
		recs = log.Records()
		if err := ledger.feed(recs[before:], redone); err != nil {
			t.Fatalf("round %d, from the recovery on: %v", round, err)
		}
		fed = len(recs)
		t.Logf("round %d: crash kind %d; recovery redid %d writes (%d of installed levels) and reissued %d reads",
			round, kind, len(plan.redo), len(redone), len(plan.reads))
	}
	if torn == 0 {
		t.Error("storage never died in a Write: no write was torn")
	}
	if lost == 0 {
		t.Error("the power losses reverted no write")
	}
	t.Logf("%d acknowledged writes; %d writes torn, %d slot writes lost to power cuts", acked.Load(), torn, lost)
	r.close()
}

// crashSwitch is the store clients see across crashes: each call goes to
// the store open at the time; a crash waits for the calls in flight on
// the dying store (they fail) and swaps in the reopened one.
type crashSwitch struct {
	mu  sync.RWMutex
	s   kv.Store
	gen atomic.Int64 // stores swapped in
}

// await waits until the store of generation gen is replaced.
func (w *crashSwitch) await(gen int64) {
	for w.gen.Load() == gen {
		time.Sleep(time.Millisecond)
	}
}

func (w *crashSwitch) Get(ctx context.Context, k string) ([]byte, bool, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.s.Get(ctx, k)
}

func (w *crashSwitch) Put(ctx context.Context, k string, v []byte) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.s.Put(ctx, k, v)
}

func (w *crashSwitch) Delete(ctx context.Context, k string) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.s.Delete(ctx, k)
}

func (w *crashSwitch) Stats() kv.Stats { return kv.Stats{} }
func (w *crashSwitch) Close() error    { return nil }

// linOp is an operation of TestCrashLinearizable's history.
type linOp struct {
	Op     OpKind
	Key    string
	Val    string // a Put's (unique), or what a Get returned
	Found  bool   // a Get's
	Failed bool   // a Put or Delete cut off by a crash: it took effect or not
}

type linState struct {
	Val    string
	Exists bool
}

// crashModel is a key-value register per key in which a write cut off by
// a crash may or may not have taken effect: nondeterministic, each such
// write leads to both states. A crash fixes its writes' fate by the time
// the store reopens, so the history gives them that moment as their
// return.
var crashModel = (&porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(linOp).Key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range slices.Sorted(maps.Keys(by)) {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, _ any) []any {
		st, in := state.(linState), input.(linOp)
		var next linState
		switch in.Op {
		case OpGet:
			if in.Found != st.Exists || in.Val != st.Val {
				return nil
			}
			return []any{st}
		case OpPut:
			next = linState{Val: in.Val, Exists: true}
		}
		if in.Failed {
			return []any{st, next}
		}
		return []any{next}
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(linOp)
		switch {
		case in.Op == OpGet && in.Found:
			return fmt.Sprintf("get(%s) -> %q", in.Key, in.Val)
		case in.Op == OpGet:
			return fmt.Sprintf("get(%s) -> missing", in.Key)
		case in.Op == OpPut:
			return fmt.Sprintf("put(%s, %q) failed=%v", in.Key, in.Val, in.Failed)
		}
		return fmt.Sprintf("delete(%s) failed=%v", in.Key, in.Failed)
	},
}).ToModel()

// TestCrashLinearizable: porcupine over a history cut by crashes. 8
// clients mix Gets (50%), Puts of unique values (40%) and Deletes (10%),
// half on one hot key and half on 4 others, while the store (checkpoints
// every 40 inputs) is killed at random moments 6 times and reopened
// (calls wait for the reopening); each client ends with a Get of every
// key. A Put or Delete the crash cut off may or may not have taken
// effect, decided by the time the store reopens (crashModel); a Get cut
// off observed nothing. The whole history, across the crashes, must be
// linearizable per key: no acknowledged write is lost, none applied
// twice, none resurfaces once overwritten.
func TestCrashLinearizable(t *testing.T) {
	const crashes, clients, opsAfter = 6, 8, 40
	r := newCrashRig(t, 64)
	r.every = 160
	r.open(true)
	w := &crashSwitch{s: r.s}
	begin := time.Now()
	now := func() int64 { return int64(time.Since(begin)) }
	var reopened []int64 // when each reopened store took calls
	var finished atomic.Bool
	go func() {
		rng := rand.New(rand.NewPCG(4, 4))
		for range crashes {
			time.Sleep(time.Duration(5+rng.IntN(40)) * time.Millisecond)
			r.kill()
			w.mu.Lock()
			r.bury()
			r.open(false)
			w.s = r.s
			reopened = append(reopened, now())
			w.gen.Add(1)
			w.mu.Unlock()
		}
		finished.Store(true)
	}()
	keys := []string{"hot", "k1", "k2", "k3", "k4"}
	var mu sync.Mutex
	var history []porcupine.Operation
	var failed int
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 5))
			do := func(in linOp) {
				gen, call := w.gen.Load(), now()
				var err error
				switch in.Op {
				case OpGet:
					var v []byte
					v, in.Found, err = w.Get(t.Context(), in.Key)
					in.Val = string(v)
				case OpPut:
					err = w.Put(t.Context(), in.Key, []byte(in.Val))
				default:
					err = w.Delete(t.Context(), in.Key)
				}
				ret := now()
				if err != nil {
					w.await(gen) // the next call goes to the reopened store
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					if in.Op == OpGet {
						return
					}
					in.Failed, ret = true, -1 // the reopening's time, below
				}
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: nil, Return: ret})
			}
			for i, extra := 0, 0; extra < opsAfter; i++ {
				if finished.Load() {
					extra++
				}
				in := linOp{Key: keys[0]}
				if rng.IntN(2) == 0 {
					in.Key = keys[1+rng.IntN(len(keys)-1)]
				}
				switch p := rng.IntN(10); {
				case p < 5:
					in.Op = OpGet
				case p < 9:
					in.Op, in.Val = OpPut, fmt.Sprint("c", c, ".", i)
				default:
					in.Op = OpDelete
				}
				do(in)
			}
			for _, k := range keys {
				do(linOp{Op: OpGet, Key: k})
			}
		})
	}
	wg.Wait()
	r.close()
	for i, op := range history {
		if op.Return >= 0 {
			continue
		}
		j, _ := slices.BinarySearch(reopened, op.Call)
		if j == len(reopened) {
			t.Fatalf("a call at %v failed after the last reopening", time.Duration(op.Call))
		}
		history[i].Return = reopened[j]
	}
	switch res, info := porcupine.CheckOperationsVerbose(crashModel, history, time.Minute); res {
	case porcupine.Ok:
	case porcupine.Illegal:
		f, err := os.CreateTemp("", "oblivistore-crash-linearizability-*.html")
		if err == nil {
			porcupine.Visualize(crashModel, info, f)
			f.Close()
		}
		t.Fatalf("the history of %d operations across %d crashes is NOT linearizable; visualization: %s", len(history), crashes, f.Name())
	default:
		t.Fatalf("the linearizability check of %d operations timed out", len(history))
	}
	if failed < crashes {
		t.Errorf("%d operations failed across %d crashes: the crashes cut off too little", failed, crashes)
	}
	t.Logf("linearizable across %d crashes: %d operations, %d cut off", crashes, len(history), failed)
}

// TestPowerLoss: storage that syncs only at the journal's checkpoints
// (kvtest.Volatile) loses every write since the last one to a power cut,
// and the journal survives; reopening loses nothing acknowledged: the
// journal's inputs rebuild every write since the checkpoint and recovery
// redoes them. With the default spacing no checkpoint follows the
// creation's, so storage loses all; with one every 100 records of each
// machine, it loses the writes since the last. (Each machine checkpoints
// on its own, in the background: at every 16 records, when a record held
// one entry, they often covered every write before the power cut, and
// the test then exercised nothing.)
func TestPowerLoss(t *testing.T) {
	for _, every := range []uint64{0, 100} {
		t.Run(fmt.Sprint("checkpoint every ", every), func(t *testing.T) {
			kvtest.CheckPowerLoss(t, func(ctx context.Context, env kv.Env) (kv.Store, error) {
				s, err := open(ctx, env)
				if err != nil {
					return nil, err
				}
				if every > 0 {
					s.onLoop(func() { s.log.SetEvery(every) })
				}
				return s, nil
			}, kv.Env{Capacity: 64, ValueSize: 16})
		})
	}
}

// TestDeposedWriteRefused: a store whose write is held in flight while a
// later open of it, from a copy of its journal, takes over: storage
// refuses the held write, the older store fails with kv.ErrFenced (not
// kv.ErrTampered), and the newer serves every acknowledged write.
func TestDeposedWriteRefused(t *testing.T) {
	for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Redis()} {
		t.Run(st.Name, func(t *testing.T) {
			kvtest.CheckDeposed(t, kvtest.Config{Protocol: "oblivistore", Capacity: 256, ValueSize: 64, Durable: true, Integrity: true}, st)
		})
	}
}
