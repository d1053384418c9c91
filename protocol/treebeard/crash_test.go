package treebeard_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

// crashable is a treebeard store on memory storage whose journal a test
// holds, to crash it as a process death would.
type crashable struct {
	t    *testing.T
	b    *mem.Backend
	keys *seal.Keys
	dir  string
	opts treebeard.Options
	s    kv.Store
	j    *journal.Journal
}

func (c *crashable) open(fresh bool) {
	c.t.Helper()
	j, err := journal.Open(c.dir, c.keys, journal.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.b.Reopen()
	s, err := treebeard.OpenRaw(c.t.Context(), kv.Env{Backend: c.b, Keys: c.keys, Capacity: 256, ValueSize: 16,
		Fresh: fresh, Journal: j, Options: c.opts})
	if err != nil {
		j.Crash()
		c.t.Fatal(err)
	}
	c.s, c.j = s, j
}

// crash kills the store as a process death would: its journal writes
// nothing more, so the operations in flight fail without writing to
// storage (whatever passed its record may have written), and the store's
// goroutines are wound down before storage is reopened.
func (c *crashable) crash() {
	c.j.Crash()
	c.s.Close()
}

// TestCrashRecovers: 8 clients write and delete keys of their own under
// busy evictions (A=2, K=3) while the store is crashed 10 times at random
// moments and reopened; after each crash every key reads back with its
// last acknowledged value, or with the value of the one operation on it
// that the crash cut off (its outcome is unknown), and nothing reads as
// tampered.
func TestCrashRecovers(t *testing.T) {
	c := &crashable{t: t, b: mem.New(), keys: kvtest.NewKeys(t), dir: t.TempDir(),
		opts: treebeard.Options{A: 2, K: 3, Epoch: -1}}
	c.open(true)
	r := rand.New(rand.NewPCG(5, 5))
	// Per key, one client: its last acknowledged value and the value of
	// an operation cut off ("" for a delete, or none).
	type outcome struct{ acked, cut string }
	keys := map[string]*outcome{}
	for cl := range 8 {
		for j := range 3 {
			keys[fmt.Sprint("k", cl, ".", j)] = &outcome{}
		}
	}
	for round := range 10 {
		ctx, stop := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for cl := range 8 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					k := fmt.Sprint("k", cl, ".", i%3)
					o := keys[k]
					v := fmt.Sprint(round, ".", i)
					var err error
					if i%5 == 4 {
						v, err = "", c.s.Delete(ctx, k)
					} else {
						err = c.s.Put(ctx, k, []byte(v))
					}
					if err != nil {
						o.cut = v
						return
					}
					o.acked, o.cut = v, v
				}
			})
		}
		for i := r.IntN(40); i >= 0; i-- { // let some epochs through
			if _, _, err := c.s.Get(t.Context(), "k0.0"); err != nil {
				break
			}
		}
		c.crash()
		stop()
		wg.Wait()
		c.open(false)
		for k, o := range keys {
			got, ok, err := c.s.Get(t.Context(), k)
			if err != nil || (string(got) != o.acked || ok != (o.acked != "")) && (string(got) != o.cut || ok != (o.cut != "")) {
				t.Fatalf("round %d: after the crash Get(%q) = %q, %v, %v; want %q (or %q, cut off)", round, k, got, ok, err, o.acked, o.cut)
			}
			o.acked = string(got) // the cut-off operation may have taken effect
			o.cut = o.acked
		}
	}
	if err := c.s.Close(); err != nil {
		t.Fatal(err)
	}
	c.j.Close()
}

// TestEarlierCheckpointNamesNoKeys: a store whose Stash shards'
// checkpoints hold no names (an earlier build's) opens and serves, and
// names its keys only once each is written again.
func TestEarlierCheckpointNamesNoKeys(t *testing.T) {
	kvtest.CheckEarlierUnnamed(t, treebeard.OpenRaw, kv.Env{Capacity: 256, ValueSize: 16, Options: treebeard.Options{A: 2, K: 3}},
		func(s kv.Store) {
			if err := treebeard.CheckpointUnnamed(t.Context(), s); err != nil {
				t.Fatal(err)
			}
		})
}

// TestPowerLoss: with storage syncing only at checkpoints, a power cut
// loses nothing acknowledged (the journal redoes what storage lost), under
// busy evictions.
func TestPowerLoss(t *testing.T) {
	kvtest.CheckPowerLoss(t, treebeard.OpenRaw, kv.Env{Capacity: 256, ValueSize: 16, Options: treebeard.Options{A: 2, K: 3}})
}

// crashAfterSlotRead, once armed, lets skip Reads of tree 0's slots and
// then one more reach storage, and then crashes the journal: the last
// Read's own record never comes, as when the process dies between a Read
// and its commit.
type crashAfterSlotRead struct {
	*mem.Backend
	mu    sync.Mutex
	armed *journal.Journal
	skip  int
	fail  int // slot Reads of tree 0 to refuse (backend.ErrClosed), unarmed
}

func (b *crashAfterSlotRead) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	b.mu.Lock()
	if _, _, slot := (ringoram.Layout{Prefix: treebeard.TreePrefix(0)}).ParseSlot(addrs[0]); slot && b.fail > 0 {
		b.fail--
		b.mu.Unlock()
		return nil, backend.ErrClosed
	}
	b.mu.Unlock()
	vals, err := b.Backend.Read(ctx, addrs)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, _, slot := (ringoram.Layout{Prefix: treebeard.TreePrefix(0)}).ParseSlot(addrs[0]); slot && b.armed != nil {
		if b.skip--; b.skip >= 0 {
			return vals, err
		}
		b.armed.Crash()
		b.armed = nil
	}
	return vals, err
}

// TestCrashMidReadResumed: the process dies after a slot Read reached
// storage and before its operation's record was journaled, in a multi-path
// read and in an eviction. Recovery issues the identical Read again from
// the journaled plan (Treebeard Sec. 5.3.3), so on the Tap no slot the
// crashed Read chose is read again but by that same Read, and the key
// reads back. Recovery that ignores the plan (leakRecoveryForgetsPlans)
// reads the slots of real blocks again beside fresh dummies, which this
// test rejects. A first recovery whose storage refuses the resumed Read
// fails to open and keeps the plan for the next.
func TestCrashMidReadResumed(t *testing.T) {
	for _, c := range []struct {
		name string
		skip int // slot Reads before the one cut short
		o    treebeard.Options
	}{
		{"multi-path read", 0, treebeard.Options{Trees: 1, ORAMShards: 1, StashShards: 1, Epoch: -1}},
		{"eviction", 1, treebeard.Options{Trees: 1, ORAMShards: 1, StashShards: 1, Epoch: -1, A: 1, K: 2}},
	} {
		for name, lk := range map[string]treebeard.Leak{"resumed": 0, "plan ignored (leak)": treebeard.LeakRecoveryForgetsPlans} {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				o := c.o
				o.TestingKnobs.Leak = lk
				err := crashMidRead(t, o, c.skip, lk == 0)
				if (err != nil) != (lk != 0) {
					t.Fatalf("recovery view: %v", err)
				}
				t.Logf("recovery view: %v", err)
			})
		}
	}
}

// crashMidRead crashes a store between the slot Read after skip others and
// its operation's record, reopens it (after a first recovery whose resumed
// Read storage refuses, with refuseFirst), reads the key back, and checks
// the Tap.
func crashMidRead(t *testing.T, o treebeard.Options, skip int, refuseFirst bool) error {
	m, keys, dir, log := mem.New(), kvtest.NewKeys(t), t.TempDir(), &observe.MemoryLog{}
	b := &crashAfterSlotRead{Backend: m, skip: skip}
	tryOpen := func(fresh bool) (kv.Store, *journal.Journal, error) {
		t.Helper()
		j, err := journal.Open(dir, keys, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m.Reopen()
		s, err := treebeard.OpenRaw(t.Context(), kv.Env{Backend: observe.NewTap(b, log), Keys: keys, Capacity: 256,
			ValueSize: 16, Fresh: fresh, Journal: j, Options: o})
		if err != nil {
			j.Crash()
		}
		return s, j, err
	}
	open := func(fresh bool) (kv.Store, *journal.Journal) {
		t.Helper()
		s, j, err := tryOpen(fresh)
		if err != nil {
			t.Fatal(err)
		}
		return s, j
	}
	s, j := open(true)
	items := map[string][]byte{"k": []byte("v")}
	for i := range 20 {
		items[fmt.Sprint("other", i)] = []byte("x")
	}
	if _, err := s.(kv.Loader).Load(t.Context(), maps.All(items)); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.armed = j
	b.mu.Unlock()
	before := len(log.Records())
	s.Get(t.Context(), "k")                      // cut short in its read, or in the eviction after it
	kvtest.WaitFor(t, "the crash", func() bool { // an eviction runs after the Get's reply
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.armed == nil
	})
	crashed := slotReads(log.Records()[before:])
	if len(crashed) != skip+1 {
		t.Fatalf("%d slot Reads before the crash, want %d", len(crashed), skip+1)
	}
	s.Close()
	j.Crash()
	after := len(log.Records())
	if refuseFirst {
		b.mu.Lock()
		b.fail = 1
		b.mu.Unlock()
		if _, _, err := tryOpen(false); err == nil {
			t.Fatal("a recovery whose resumed Read storage refused opened the store")
		}
	}
	s, j = open(false)
	defer j.Close()
	defer s.Close()
	got, ok, err := s.Get(t.Context(), "k")
	if err != nil || !ok || string(got) != "v" {
		t.Fatalf("Get(k) after recovery = %q, %v, %v", got, ok, err)
	}
	return sameSlotsOnlyWhole(crashed[skip], log.Records()[after:])
}

// slotReads returns the slot addresses of each Read of tree 0's slots.
func slotReads(recs []observe.Record) [][]string {
	layout := ringoram.Layout{Prefix: treebeard.TreePrefix(0)}
	var out [][]string
	for _, r := range recs {
		if r.Op != observe.OpRead || len(r.Addrs) == 0 {
			continue
		}
		if _, _, ok := layout.ParseSlot(r.Addrs[0]); ok {
			out = append(out, r.Addrs)
		}
	}
	return out
}

// sameSlotsOnlyWhole checks that every later Read sharing a slot with the
// crashed one that no Write has rewritten since is the crashed Read whole,
// and that one is.
func sameSlotsOnlyWhole(crashed []string, later []observe.Record) error {
	again, rewritten := 0, map[string]bool{}
	for _, r := range later {
		if r.Op == observe.OpWrite {
			for _, a := range r.Addrs {
				rewritten[a] = true
			}
			continue
		}
		if r.Op != observe.OpRead {
			continue
		}
		if slices.Equal(r.Addrs, crashed) && !slices.ContainsFunc(crashed, func(a string) bool { return rewritten[a] }) {
			again++
			continue
		}
		shared := 0
		for _, a := range r.Addrs {
			if slices.Contains(crashed, a) && !rewritten[a] {
				shared++
			}
		}
		if shared > 0 {
			return fmt.Errorf("after recovery a Read of %d addresses shares %d slots with the crashed Read of %d", len(r.Addrs), shared, len(crashed))
		}
	}
	if again == 0 {
		return fmt.Errorf("recovery did not issue the crashed Read of %d slots again", len(crashed))
	}
	return nil
}

// TestDeposedWriteRefused: a store whose tree Write is held in flight
// while a later open of it, from a copy of its journal, takes over:
// storage refuses the held Write, the older store fails with kv.ErrFenced
// (not kv.ErrTampered), and the newer serves every acknowledged write.
func TestDeposedWriteRefused(t *testing.T) {
	for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Redis()} {
		t.Run(st.Name, func(t *testing.T) {
			kvtest.CheckDeposed(t, kvtest.Config{Protocol: "treebeard", Capacity: 256, ValueSize: 64, Durable: true, Integrity: true}, st)
		})
	}
}
