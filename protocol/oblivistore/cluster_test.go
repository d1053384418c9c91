package oblivistore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/seal"
)

// cluster drives a Front and its partition groups as separate machines,
// as a deployment over several processes would. Every message between
// them crosses sealed through a fault net that delays every message by a
// random number of ticks (so messages overtake each other), loses some
// and delivers some twice; every clusterResendEvery ticks each machine
// applies a Resend, as a driver's retransmission timer makes it; storage calls complete after random delays, a read fails
// now and then and is issued again (as the driver retries it), and some
// completions arrive twice. Simulated clients, each with one request at
// a time, mix Gets, Puts of unique values and Deletes over a hot key,
// stored keys and missing ones, and send some requests twice. The
// cluster records every entry each machine applied (encoded, as a log
// holds it), the outputs of each, and the machines' snapshots at chosen
// points, and keeps the history of the clients' operations.
type cluster struct {
	t       *testing.T
	rng     *rand.Rand
	keys    *seal.Keys
	front   *FrontMachine
	groups  []*GroupMachine
	storage simStorage
	tick    int
	net     []delivery
	io      []completion

	logs []machineLog // the Front's, then each group's

	clients   []client
	nextID    uint64
	byID      map[uint64]int // the client waiting for each request
	clock     int64
	history   []porcupine.Operation
	finalKeys []string // keys still to read at the end

	// What the faults did: messages delivered twice, messages delivered
	// before one sent earlier, completions delivered twice, reads failed,
	// messages lost; and the messages the machines sent again.
	duplicates, overtaken, completedTwice, failedReads, lost, resent int
	seen                                                             map[[3]uint64]bool // messages delivered: sender, receiver, sequence number
	latest                                                           map[[2]Node]uint64 // the latest sequence number delivered, by sender and receiver
}

// machineLog is what one machine applied: each entry encoded, the
// outputs it caused encoded, and snapshots taken before chosen entries.
type machineLog struct {
	initial   []byte
	entries   [][]byte
	outputs   [][]byte
	snapshots map[int][]byte // by the index of the entry applied next
}

// delivery is a sealed message in the fault net, due at a tick.
type delivery struct {
	due int
	msg Sealed
}

// completion is a storage call's completion, due at a tick.
type completion struct {
	due int
	out Output
	// done, for a completion delivered a second time, is the first's.
	done *Input
}

// client is a simulated client: its request in flight, if any.
type client struct {
	busy bool
	op   linOp
	call int64
	left int // operations still to issue
}

const (
	clusterKeys    = 128 // stored at the start
	clusterMissing = 16  // keys never stored unless a Put makes them
	clusterClients = 8
	clusterMaxLag  = 12 // ticks a message or a storage call may take
	// clusterResendEvery is the period, in ticks, of the machines'
	// retransmission timers.
	clusterResendEvery = 3 * clusterMaxLag
)

func newCluster(t *testing.T, groups, opsPerClient int, seed uint64) *cluster {
	t.Helper()
	o := Options{Groups: groups}.EnsureDefaults(clusterKeys + clusterMissing)
	if err := o.Validate(clusterKeys + clusterMissing); err != nil {
		t.Fatal(err)
	}
	c := NewCore(clusterKeys+clusterMissing, o, [32]byte{byte(seed), 9})
	cl := &cluster{t: t, rng: rand.New(rand.NewPCG(seed, 5)), keys: kvtest.SeededKeys(t, 3),
		front: c.front, groups: c.groups, storage: simStorage{}, byID: map[uint64]int{},
		seen: map[[3]uint64]bool{}, latest: map[[2]Node]uint64{}}
	writes, _, err := c.Load(func(yield func(string, []byte) bool) {
		for i := range clusterKeys {
			if !yield(fmt.Sprint("k", i), []byte(fmt.Sprint("v0-", i))) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		cl.storage.write(w)
	}
	cl.logs = make([]machineLog, 1+groups)
	for m := range cl.logs {
		cl.logs[m].initial = cl.snapshot(m)
		cl.logs[m].snapshots = map[int][]byte{}
	}
	cl.clients = make([]client, clusterClients)
	for i := range cl.clients {
		cl.clients[i].left = opsPerClient
	}
	// The loaded values are the history's first writes, before any call.
	for i := range clusterKeys {
		k := fmt.Sprint("k", i)
		call := int64(2*i - 2*clusterKeys)
		cl.history = append(cl.history, porcupine.Operation{Input: linOp{Op: OpPut, Key: k, Val: fmt.Sprint("v0-", i)}, Call: call, Return: call + 1})
		cl.finalKeys = append(cl.finalKeys, k)
	}
	for i := range clusterMissing {
		cl.finalKeys = append(cl.finalKeys, fmt.Sprint("m", i))
	}
	return cl
}

// snapshot returns machine m's snapshot (0: the Front, g+1: group g).
func (cl *cluster) snapshot(m int) []byte {
	var b []byte
	var err error
	if m == 0 {
		b, err = cl.front.Snapshot()
	} else {
		b, err = cl.groups[m-1].Snapshot()
	}
	if err != nil {
		cl.t.Fatal(err)
	}
	return b
}

// snapshotAt marks n random points of a run whose machines apply the
// numbers of entries lengths gives (a run with the same seed applies the
// same): a machine, and the entry before which to snapshot it.
func (cl *cluster) snapshotAt(n int, lengths []int, rng *rand.Rand) {
	for taken := 0; taken < n; {
		m := rng.IntN(len(cl.logs))
		at := 1 + rng.IntN(lengths[m]-1)
		if _, dup := cl.logs[m].snapshots[at]; !dup {
			cl.logs[m].snapshots[at] = nil
			taken++
		}
	}
}

// run lets the clients issue their operations, then read every key once
// (finalKeys), and runs until every request is answered and nothing is
// in flight.
func (cl *cluster) run() {
	cl.t.Helper()
	for ; !cl.quiet(); cl.tick++ {
		if cl.tick > 1_000_000 {
			cl.t.Fatalf("the cluster stalled: %d messages and %d storage calls in flight", len(cl.net), len(cl.io))
		}
		cl.issue()
		cl.deliver()
		cl.complete()
		if cl.tick%clusterResendEvery == 0 && cl.resend() == 0 && len(cl.net) == 0 && len(cl.io) == 0 && cl.waiting() {
			cl.t.Fatal("the cluster stalled: requests wait, and no message or storage call is in flight or to be sent again")
		}
	}
}

// resend applies a Resend to every machine, as their retransmission
// timers make their drivers do, and returns the number of messages they
// sent again.
func (cl *cluster) resend() int {
	before := cl.resent
	cl.applyFront(FrontEntry{Resend: &Resend{}})
	for g := range cl.groups {
		cl.applyGroup(int32(g), GroupEntry{Resend: &Resend{}})
	}
	return cl.resent - before
}

// waiting reports whether a client waits for an answer.
func (cl *cluster) waiting() bool {
	return slices.ContainsFunc(cl.clients, func(c client) bool { return c.busy })
}

// quiet reports whether every operation is answered and nothing is in
// flight.
func (cl *cluster) quiet() bool {
	for _, c := range cl.clients {
		if c.busy || c.left > 0 {
			return false
		}
	}
	return len(cl.finalKeys) == 0 && len(cl.net) == 0 && len(cl.io) == 0
}

// issue lets some idle clients send a request: their next operation, or
// once every client has issued all of its, a read of the next key left.
func (cl *cluster) issue() {
	left := 0
	for _, c := range cl.clients {
		left += c.left
	}
	for i := range cl.clients {
		c := &cl.clients[i]
		if c.busy || cl.rng.IntN(3) != 0 {
			continue
		}
		switch {
		case c.left > 0:
			c.left--
			cl.send(i, cl.randomOp())
		case left == 0 && len(cl.finalKeys) > 0:
			cl.send(i, linOp{Op: OpGet, Key: cl.finalKeys[0]})
			cl.finalKeys = cl.finalKeys[1:]
		}
	}
}

// randomOp draws an operation: the hot key k0 a third of the time, else a
// stored or a missing key; Gets half the time, Puts of unique values,
// Deletes.
func (cl *cluster) randomOp() linOp {
	key := "k0"
	switch r := cl.rng.IntN(6); {
	case r == 0:
		key = fmt.Sprint("m", cl.rng.IntN(clusterMissing))
	case r >= 2:
		key = fmt.Sprint("k", cl.rng.IntN(clusterKeys))
	}
	switch r := cl.rng.IntN(10); {
	case r < 5:
		return linOp{Op: OpGet, Key: key}
	case r < 9:
		return linOp{Op: OpPut, Key: key, Val: fmt.Sprint("v", cl.nextID+1)}
	}
	return linOp{Op: OpDelete, Key: key}
}

// send sends client i's request to the Front, some twice.
func (cl *cluster) send(i int, op linOp) {
	c := &cl.clients[i]
	cl.nextID++
	c.busy, c.op, c.call = true, op, cl.now()
	cl.byID[cl.nextID] = i
	r := Request{ID: cl.nextID, Op: op.Op, Key: op.Key}
	if op.Op == OpPut {
		r.Val = []byte(op.Val)
	}
	cl.applyFront(FrontEntry{Request: &r})
	if cl.rng.IntN(10) == 0 {
		cl.applyFront(FrontEntry{Request: &r})
	}
}

func (cl *cluster) now() int64 {
	cl.clock++
	return cl.clock
}

// record adds client's completed operation to the history.
func (cl *cluster) record(client int, op linOp, call int64) {
	cl.history = append(cl.history, porcupine.Operation{ClientId: client + 1, Input: op, Call: call, Return: cl.now()})
}

// applyFront applies an entry to the Front as its log would: encoded,
// decoded, recorded.
func (cl *cluster) applyFront(e FrontEntry) {
	cl.t.Helper()
	rec := AppendFrontEntry(nil, e)
	e, err := DecodeFrontEntry(rec)
	if err != nil {
		cl.t.Fatal(err)
	}
	outs, err := applyLogged(cl, 0, cl.front, e, rec, frontOutputs)
	if err != nil {
		cl.t.Fatalf("front, entry %d: %v", len(cl.logs[0].entries), err)
	}
	if e.Resend != nil {
		cl.resent += len(outs)
	}
	for _, o := range outs {
		switch {
		case o.Reply != nil:
			cl.reply(*o.Reply)
		default:
			s, err := SealToGroup(cl.keys, *o.Msg)
			if err != nil {
				cl.t.Fatal(err)
			}
			cl.post(s)
		}
	}
}

// applyGroup applies an entry to group g as its log would.
func (cl *cluster) applyGroup(g int32, e GroupEntry) {
	cl.t.Helper()
	rec := AppendGroupEntry(nil, e)
	e, err := DecodeGroupEntry(rec)
	if err != nil {
		cl.t.Fatal(err)
	}
	outs, err := applyLogged(cl, int(g)+1, cl.groups[g], e, rec, groupOutputs)
	if err != nil {
		cl.t.Fatalf("group %d, entry %d: %v", g, len(cl.logs[g+1].entries), err)
	}
	if e.Resend != nil {
		cl.resent += len(outs)
	}
	for _, o := range outs {
		switch {
		case o.Msg != nil:
			s, err := SealToFront(cl.keys, *o.Msg)
			if err != nil {
				cl.t.Fatal(err)
			}
			cl.post(s)
		default:
			cl.io = append(cl.io, completion{due: cl.tick + 1 + cl.rng.IntN(clusterMaxLag), out: Output{Read: o.Read, Write: o.Write}})
		}
	}
}

// applyLogged applies an entry (rec encoded) to machine m of the
// cluster, recording the entry, its outputs and a snapshot if one is due
// before it.
func applyLogged[E, O any](cl *cluster, m int, mc Machine[E, O], e E, rec []byte, encodeOuts func([]O) []byte) ([]O, error) {
	log := &cl.logs[m]
	if _, due := log.snapshots[len(log.entries)]; due {
		log.snapshots[len(log.entries)] = cl.snapshot(m)
	}
	log.entries = append(log.entries, rec)
	outs, err := mc.Apply(e)
	log.outputs = append(log.outputs, encodeOuts(outs))
	return outs, err
}

// frontOutputs and groupOutputs encode a machine's outputs for
// comparison: messages in their wire encoding, the rest printed.
func frontOutputs(outs []FrontOutput) []byte {
	var b []byte
	for _, o := range outs {
		if o.Msg != nil {
			b = appendPartitionMsg(appendMsgID(binary.AppendUvarint(b, uint64(o.Msg.Group)), o.Msg.ID), o.Msg.Msg)
		} else {
			b = fmt.Appendf(b, "%+v;", *o.Reply)
		}
	}
	return b
}

func groupOutputs(outs []GroupOutput) []byte {
	var b []byte
	for _, o := range outs {
		switch {
		case o.Msg != nil:
			b = appendFrontMsg(appendMsgID(b, o.Msg.ID), o.Msg.Msg)
		case o.Read != nil:
			b = fmt.Appendf(b, "%+v;", *o.Read)
		default:
			b = fmt.Appendf(b, "%+v;", *o.Write)
		}
	}
	return b
}

// post puts a sealed message in the fault net: lost one time in ten,
// else due after a random delay, and one in five a second time.
func (cl *cluster) post(s Sealed) {
	if cl.rng.IntN(10) == 0 {
		cl.lost++
		return
	}
	copies := 1
	if cl.rng.IntN(5) == 0 {
		copies = 2
	}
	for range copies {
		cl.net = append(cl.net, delivery{due: cl.tick + cl.rng.IntN(clusterMaxLag), msg: s})
	}
}

// count notes what the net did to a message delivered: a duplicate, or
// one delivered after a later one of its link (acknowledgements alone,
// all numbered 0, aside).
func (cl *cluster) count(s Sealed) {
	if s.ID.Seq == 0 {
		return
	}
	link := [2]Node{s.ID.From, s.To}
	seen := [3]uint64{uint64(s.ID.From), uint64(s.To), s.ID.Seq}
	switch {
	case cl.seen[seen]:
		cl.duplicates++
	case s.ID.Seq < cl.latest[link]:
		cl.overtaken++
	default:
		cl.latest[link] = s.ID.Seq
	}
	cl.seen[seen] = true
}

// deliver hands on the messages due, in a random order.
func (cl *cluster) deliver() {
	var due []delivery
	cl.net = slices.DeleteFunc(cl.net, func(d delivery) bool {
		if d.due <= cl.tick {
			due = append(due, d)
			return true
		}
		return false
	})
	cl.rng.Shuffle(len(due), func(a, b int) { due[a], due[b] = due[b], due[a] })
	for _, d := range due {
		cl.count(d.msg)
		if d.msg.To == FrontNode {
			m, err := OpenToFront(cl.keys, d.msg)
			if err != nil {
				cl.t.Fatal(err)
			}
			cl.applyFront(FrontEntry{Msg: &m})
			continue
		}
		m, err := OpenToGroup(cl.keys, d.msg)
		if err != nil {
			cl.t.Fatal(err)
		}
		cl.applyGroup(int32(m.Group), GroupEntry{Msg: &m})
	}
}

// complete completes the storage calls due, in a random order: a read
// fails one time in ten and is issued again; a completion is delivered a
// second time one time in ten.
func (cl *cluster) complete() {
	var due []completion
	cl.io = slices.DeleteFunc(cl.io, func(c completion) bool {
		if c.due <= cl.tick {
			due = append(due, c)
			return true
		}
		return false
	})
	cl.rng.Shuffle(len(due), func(a, b int) { due[a], due[b] = due[b], due[a] })
	for _, c := range due {
		in := c.done
		if in == nil {
			if c.out.Read != nil && cl.rng.IntN(10) == 0 {
				cl.failedReads++
				c.due = cl.tick + 1 + cl.rng.IntN(clusterMaxLag) // failed: the driver retries
				cl.io = append(cl.io, c)
				continue
			}
			done, err := cl.storage.complete(c.out)
			if err != nil {
				cl.t.Fatal(err)
			}
			in = &done
			if cl.rng.IntN(10) == 0 {
				cl.io = append(cl.io, completion{due: cl.tick + 1 + cl.rng.IntN(clusterMaxLag), out: c.out, done: in})
			}
		} else {
			cl.completedTwice++
		}
		switch {
		case in.Read != nil:
			in.Read.Group = c.out.Read.Group
			cl.applyGroup(in.Read.Group, GroupEntry{Read: in.Read})
		default:
			in.Write.Group = c.out.Write.Group
			cl.applyGroup(in.Write.Group, GroupEntry{Write: in.Write})
		}
	}
}

// reply takes the Front's reply to a request.
func (cl *cluster) reply(r Reply) {
	i, ok := cl.byID[r.Seq]
	if !ok {
		cl.t.Fatalf("reply to request %d, which no client waits for (a duplicate answered twice?)", r.Seq)
	}
	delete(cl.byID, r.Seq)
	c := &cl.clients[i]
	op := c.op
	if op.Op == OpGet {
		op.Val, op.Found = string(r.Result.Old), r.Result.Found
	}
	cl.record(i, op, c.call)
	c.busy = false
}

// TestMachinesReplay: replay determinism of each machine type. A cluster
// of the Front and two partition groups runs 8 clients of 60 operations
// under the fault net (hot, stored and missing keys, evictions and
// shuffles, failed reads, duplicates); each machine's recorded entries,
// applied to a fresh machine restored from its initial snapshot, give
// byte-identical outputs, entry by entry, and a byte-identical final
// snapshot; so do the rest of its entries applied to a machine restored
// from a snapshot taken at 20 random points of the run, in the middle of
// reads and shuffles.
func TestMachinesReplay(t *testing.T) {
	seed := kvtest.Seed(t)
	first := newCluster(t, 2, 60, seed)
	first.run()
	var lengths []int
	for _, log := range first.logs {
		lengths = append(lengths, len(log.entries))
	}
	cl := newCluster(t, 2, 60, seed)
	cl.snapshotAt(20, lengths, rand.New(rand.NewPCG(seed, 6)))
	cl.run()
	taken := 0
	for m := range cl.logs {
		log := &cl.logs[m]
		if len(log.entries) != lengths[m] {
			t.Fatalf("machine %d applied %d entries in one run and %d in another of the same seed", m, lengths[m], len(log.entries))
		}
		final := cl.snapshot(m)
		replayFrom(t, m, log.initial, log.entries, log.outputs, final)
		for at, snap := range log.snapshots {
			taken++
			replayFrom(t, m, snap, log.entries[at:], log.outputs[at:], final)
		}
	}
	if taken != 20 {
		t.Errorf("%d snapshots taken, want 20", taken)
	}
}

// replayFrom restores machine m's kind from snapshot, applies entries and
// checks each one's outputs and the final snapshot against the run's.
func replayFrom(t *testing.T, m int, snapshot []byte, entries, outputs [][]byte, final []byte) {
	t.Helper()
	var got []byte
	if m == 0 {
		got = replayMachine(t, &FrontMachine{}, snapshot, entries, outputs, DecodeFrontEntry, frontOutputs)
	} else {
		got = replayMachine(t, &GroupMachine{}, snapshot, entries, outputs, DecodeGroupEntry, groupOutputs)
	}
	if !bytes.Equal(got, final) {
		t.Errorf("machine %d: the replay's final snapshot differs from the run's (%d and %d bytes)", m, len(got), len(final))
	}
}

// replayMachine restores mc from snapshot, applies the encoded entries,
// checks each one's outputs and returns its final snapshot.
func replayMachine[E, O any](t *testing.T, mc Machine[E, O], snapshot []byte, entries, outputs [][]byte,
	decode func([]byte) (E, error), encodeOuts func([]O) []byte) []byte {
	t.Helper()
	if err := mc.Restore(snapshot); err != nil {
		t.Fatal(err)
	}
	for i, b := range entries {
		e, err := decode(b)
		if err != nil {
			t.Fatal(err)
		}
		outs, err := mc.Apply(e)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if got := encodeOuts(outs); !bytes.Equal(got, outputs[i]) {
			t.Fatalf("entry %d: the replay's outputs differ from the run's", i)
		}
	}
	snap, err := mc.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestFaultNetLinearizable: with one and with three partition groups,
// every message between the Front and the groups delayed (overtaking
// others), one in ten lost (and sent again at the sender's next Resend,
// until acknowledged), one in five delivered twice, one read in ten
// failed and retried, one completion in ten delivered twice and one
// request in ten sent twice, the clients' history, ending with a read of
// every key, is linearizable per key: no acknowledged write is lost, none
// applied twice.
func TestFaultNetLinearizable(t *testing.T) {
	for _, groups := range []int{1, 3} {
		t.Run(fmt.Sprint(groups, " groups"), func(t *testing.T) {
			cl := newCluster(t, groups, 150, kvtest.Seed(t))
			cl.run()
			if cl.duplicates == 0 || cl.overtaken == 0 || cl.completedTwice == 0 || cl.failedReads == 0 || cl.lost == 0 || cl.resent == 0 {
				t.Fatalf("the faults did not happen: %d duplicates, %d overtaken, %d completions twice, %d failed reads, %d lost, %d sent again",
					cl.duplicates, cl.overtaken, cl.completedTwice, cl.failedReads, cl.lost, cl.resent)
			}
			t.Logf("%d operations; %d messages delivered twice, %d overtaken, %d lost, %d sent again; %d completions twice; %d failed reads",
				len(cl.history), cl.duplicates, cl.overtaken, cl.lost, cl.resent, cl.completedTwice, cl.failedReads)
			if !porcupine.CheckOperations(crashModel, cl.history) {
				t.Fatal("the history is not linearizable")
			}
		})
	}
}
