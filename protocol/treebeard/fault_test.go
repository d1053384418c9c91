package treebeard_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// lossy drops, copies, delays, reorders, delivers late copies of and
// alters a few percent of the layers' messages each.
var lossy = treebeard.Faults{DropRequest: 0.04, DropReply: 0.04, Duplicate: 0.04, Reorder: 0.04, Late: 0.04, Tamper: 0.02, MaxDelay: 300 * time.Microsecond}

// faultyStore opens a store whose layers talk through net, on a mem
// backend that fails the first fails slot Reads of tree 0, with every
// backend call on log.
func faultyStore(t *testing.T, o treebeard.Options, net *treebeard.FaultNet, fails int, log *observe.MemoryLog) (kv.Store, func() kv.Store) {
	b := mem.New()
	fb := &flakySlots{Backend: b, fails: fails}
	keys, journal := kvtest.NewKeys(t), t.TempDir()
	open := func(o treebeard.Options) kv.Store {
		t.Helper()
		s, err := kv.Open(t.Context(), kv.Config{Protocol: "treebeard", Backend: fb, Keys: keys, Capacity: 256, ValueSize: 32,
			Options: o, OpenJournal: kvtest.Journal(journal), TapLog: log})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	o.TestingKnobs.Transport = net
	reopen := func() kv.Store {
		b.Reopen()
		return open(o)
	}
	return open(o), reopen
}

// TestLossyTransport: with a few percent of the layers' messages dropped
// (on the way or on the way back), copied, delayed, reordered and copied
// again after their reply (late) or altered on the way (refused by the
// sealed wire and sent again), and a few of storage's Reads failing, at
// the defaults and at the paper's parameters: a bulk load goes through;
// porcupine finds 16 clients' history linearizable; every acknowledged
// write survives a restart (the checkpoint gathered and the state
// restored over the same net); no part of an epoch is read twice (the
// trees read exactly the paths the Stash shards planned); and on the Tap
// every failed Read is followed by the identical Read (Treebeard Sec.
// 5.3.3).
func TestLossyTransport(t *testing.T) {
	paper := treebeard.PaperOptions()
	for name, o := range map[string]treebeard.Options{
		"defaults": {A: 4, K: 3, Epoch: 200 * time.Microsecond},
		"paper":    {Z: paper.Z, S: paper.S, A: 4, K: 3, Epoch: 200 * time.Microsecond},
	} {
		t.Run(name, func(t *testing.T) {
			net, log := treebeard.NewFaultNet(lossy, 1), &observe.MemoryLog{}
			s, reopen := faultyStore(t, o, net, 4, log)
			model := kvtest.Model{}
			loaded := map[string][]byte{}
			for i := range 50 {
				loaded[fmt.Sprintf("loaded-%d", i)] = []byte(fmt.Sprint("l", i))
			}
			if n, err := s.(kv.Loader).Load(t.Context(), maps.All(loaded)); err != nil || n != len(loaded) {
				t.Fatalf("Load over the lossy net = %d, %v", n, err)
			}
			maps.Copy(model, loaded)
			kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 60, DeleteFraction: 0.15})
			for i := range 60 {
				model.Put(t, s, fmt.Sprintf("durable-%d", i%40), fmt.Sprintf("v%d", i))
			}
			st := s.Stats()
			planned := kvtest.Stat(t, st, "real_reads") + kvtest.Stat(t, st, "fake_reads")
			if read := kvtest.Stat(t, st, "path_reads"); read != planned {
				t.Errorf("the trees read %v paths, the Stash shards planned %v: a part was read twice or not at all", read, planned)
			}
			if kvtest.Stat(t, st, "messages_resent") == 0 || kvtest.Stat(t, st, "message_copies") == 0 {
				t.Errorf("no message was resent or answered as a copy: messages_resent %v, message_copies %v",
					kvtest.Stat(t, st, "messages_resent"), kvtest.Stat(t, st, "message_copies"))
			}
			net.Settle()
			ns := net.Stats()
			if ns.DroppedRequests == 0 || ns.DroppedReplies == 0 || ns.Duplicated == 0 || ns.Reordered == 0 || ns.Late == 0 || ns.Tampered == 0 {
				t.Errorf("the net did not inject every fault: %+v", ns)
			}
			if failed := wantFailedReadsRepeated(t, log); failed != 4 {
				t.Errorf("%d failed Reads on the Tap, want 4", failed)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = reopen()
			defer s.Close()
			model.Check(t, s, "after a restart")
			t.Logf("%d messages: %+v; store: resent %v, copies %v", ns.Messages, ns,
				kvtest.Stat(t, st, "messages_resent"), kvtest.Stat(t, st, "message_copies"))
		})
	}
}

// wantFailedReadsRepeated checks that every failed Read on log is followed
// by the identical Read, and returns how many failed.
func wantFailedReadsRepeated(t *testing.T, log *observe.MemoryLog) int {
	t.Helper()
	recs, failed := log.Records(), 0
	for i, r := range recs {
		if r.Op != observe.OpRead || !r.Err {
			continue
		}
		failed++
		next := slices.IndexFunc(recs[i+1:], func(n observe.Record) bool { return n.Op == observe.OpRead && slices.Equal(n.Addrs, r.Addrs) })
		if next < 0 || slices.ContainsFunc(recs[i+1:i+1+next], func(n observe.Record) bool { return sharesPrefix(n.Addrs, r.Addrs) }) {
			t.Fatalf("call %d: a failed Read was not issued again unchanged before its tree's next call", r.Seq)
		}
	}
	return failed
}

// sharesPrefix reports whether two calls touch the same tree.
func sharesPrefix(a, b []string) bool {
	return len(a) > 0 && len(b) > 0 && treeOf(a[0]) == treeOf(b[0])
}

func treeOf(addr string) string {
	for t := range 64 {
		if p := treebeard.TreePrefix(t); len(addr) >= len(p) && addr[:len(p)] == p {
			return p
		}
	}
	return ""
}

// TestPartitionedLayer: the Stash layer, then the ORAM layer, is cut off
// while clients write; the writes wait, resent until the cut heals, and
// none is lost.
func TestPartitionedLayer(t *testing.T) {
	for _, layer := range []treebeard.Layer{treebeard.LayerStash, treebeard.LayerORAM} {
		t.Run(layer.String(), func(t *testing.T) {
			net := treebeard.NewFaultNet(treebeard.Faults{}, 2)
			s, reopen := faultyStore(t, busy, net, 0, &observe.MemoryLog{})
			model := kvtest.Model{}
			model.Put(t, s, "before", "v")
			net.Cut(layer)
			done := make(chan error, 8)
			for i := range 8 {
				go func() { done <- s.Put(t.Context(), fmt.Sprintf("during-%d", i), []byte("w")) }()
			}
			kvtest.WaitFor(t, "messages lost to the cut", func() bool { return net.Stats().Cut >= 8 })
			select {
			case err := <-done:
				t.Fatalf("a write returned (%v) while its layer was cut off", err)
			default:
			}
			net.Heal()
			for range 8 {
				if err := <-done; err != nil {
					t.Fatalf("a write across a healed cut: %v", err)
				}
			}
			for i := range 8 {
				model[fmt.Sprintf("during-%d", i)] = []byte("w")
			}
			model.Check(t, s, "after the cut healed")
			if resent := kvtest.Stat(t, s.Stats(), "messages_resent"); resent == 0 {
				t.Fatal("no message was resent across the cut")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = reopen()
			defer s.Close()
			model.Check(t, s, "after a restart")
		})
	}
}

// TestMissingPart: Stash shard 1 is cut off, so the trees get only shard
// 0's parts of an epoch. The trees give the epoch up after the part
// timeout, shard 0's requests fail (a defined outcome, not a wait without
// end), shard 1's requests fail once the cut heals (their parts are late),
// and the store then serves every earlier write. Epochs and part timeouts
// run on a fake clock that only the test advances, so no part is ever
// late but the cut-off shard's, however loaded the machine.
func TestMissingPart(t *testing.T) {
	net := treebeard.NewFaultNet(treebeard.Faults{}, 3)
	clock := clockwork.NewFakeClock()
	const epoch, partTimeout = 5 * time.Millisecond, 50 * time.Millisecond
	o := treebeard.Options{StashShards: 2, Epoch: epoch,
		TestingKnobs: treebeard.TestingKnobs{PartTimeout: partTimeout, Clock: clock}}
	raw, reopen := faultyStore(t, o, net, 0, &observe.MemoryLog{})
	s := epochsOnDemand{Store: raw, t: t, clock: clock, epoch: epoch}
	model := kvtest.Model{}
	for i := range 16 {
		model.Put(t, s, fmt.Sprintf("k%d", i), "before")
	}
	const writers = 16 // over both shards: each gets one with probability 1-2^-15
	done := make(chan error, writers)
	for i := range writers {
		go func() { done <- raw.Put(t.Context(), fmt.Sprintf("k%d", i), []byte("during")) }()
	}
	kvtest.WaitFor(t, "every write in the collecting epoch", func() bool {
		return kvtest.Stat(t, raw.Stats(), kv.StatEpochRequests) == writers
	})
	net.Isolate(treebeard.Endpoint{Layer: treebeard.LayerStash, Index: 1}) // Stats asks every layer: not past here
	clock.Advance(epoch)
	if err := firstEnded(t, clock, partTimeout, done); err == nil {
		t.Fatal("a write succeeded in an epoch a shard missed")
	} else {
		t.Logf("while shard 1 is cut off: %v", err)
	}
	net.Heal()
	for range writers - 1 {
		if err := <-done; err == nil {
			t.Fatal("a write of an epoch given up succeeded")
		}
	}
	// The writes failed: their outcome is unknown, so each key holds the
	// old value or the new one.
	for i := range 16 {
		k := fmt.Sprintf("k%d", i)
		v, ok, err := s.Get(t.Context(), k)
		if err != nil || !ok || (string(v) != "before" && string(v) != "during") {
			t.Fatalf("Get(%s) after the cut = %q, %v, %v", k, v, ok, err)
		}
		model[k] = v
	}
	model.Put(t, s, "after", "v")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Store = reopen()
	defer s.Close()
	model.Check(t, s, "after a restart")
}

// firstEnded advances clock by step until one of the writes on done ends
// (a tree's part timer may start after an advance: the next one fires it),
// and returns its error; it fails t when none has ended within 20 seconds
// of real time, so an epoch that waits for its missing part forever is
// caught.
func firstEnded(t *testing.T, clock *clockwork.FakeClock, step time.Duration, done <-chan error) error {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		clock.Advance(step)
		select {
		case err := <-done:
			return err
		case <-deadline:
			t.Fatal("no write ended while a shard was cut off: the epoch waits for its missing part forever")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// epochsOnDemand runs a store's Gets and Puts one at a time on a fake
// clock, ending the collecting epoch whenever it holds a request: the
// epoch of one request is over (every tree had every part) before the
// next begins, so no part timeout can fire.
type epochsOnDemand struct {
	kv.Store
	t     *testing.T
	clock *clockwork.FakeClock
	epoch time.Duration
}

func (s epochsOnDemand) Get(ctx context.Context, key string) (v []byte, ok bool, err error) {
	s.run(func() { v, ok, err = s.Store.Get(ctx, key) })
	return v, ok, err
}

func (s epochsOnDemand) Put(ctx context.Context, key string, val []byte) (err error) {
	s.run(func() { err = s.Store.Put(ctx, key, val) })
	return err
}

// run runs op, advancing the clock by an epoch whenever requests collect.
func (s epochsOnDemand) run(op func()) {
	done := make(chan struct{})
	go func() { defer close(done); op() }()
	for {
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
			if kvtest.Stat(s.t, s.Store.Stats(), kv.StatEpochRequests) > 0 {
				s.clock.Advance(s.epoch)
			}
		}
	}
}
