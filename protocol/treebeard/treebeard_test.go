package treebeard_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// In a running store the trees keep every bucket's metadata in trusted
// memory and read it back only when recovering, so the contract's tamper
// cases on a running store leave it alone; a slot's seal binds its index
// in its bucket on its own (tree.Codec), so they move a slot only to the
// same index of another bucket, where only the bucket's address in the
// seal tells the two apart.
var cfg = kvtest.Config{Protocol: "treebeard", Integrity: true, Durable: true, NamesKeys: true,
	Cached: treebeard.IsMetaAddr, AddrKind: slotKind}

func slotKind(addr string) string {
	i, _ := treebeard.SlotIndex(addr)
	return strconv.Itoa(i)
}

func TestMain(m *testing.M) { kvtest.Main(m) }

// TestAddressKinds: IsMetaAddr and SlotIndex tell a tree's metadata and
// slot addresses, in any tree, and nothing else.
func TestAddressKinds(t *testing.T) {
	for _, tr := range []int{0, 7, 12} {
		l := ringoram.Layout{Prefix: treebeard.TreePrefix(tr)}
		if m := l.MetaAddr(5); !treebeard.IsMetaAddr(m) {
			t.Errorf("IsMetaAddr(%q) = false", m)
		}
		if a := l.SlotAddr(5, 9); treebeard.IsMetaAddr(a) {
			t.Errorf("IsMetaAddr(%q) = true for a slot", a)
		}
		if i, ok := treebeard.SlotIndex(l.SlotAddr(5, 9)); !ok || i != 9 {
			t.Errorf("SlotIndex(slot 9 of bucket 5 of tree %d) = %d, %v", tr, i, ok)
		}
		if _, ok := treebeard.SlotIndex(l.MetaAddr(5)); ok {
			t.Errorf("SlotIndex of tree %d's metadata address: ok", tr)
		}
	}
	for _, a := range []string{"meta/store", "tb/", "tb/x/m\x00", "tb/m\x00\x00\x00\x00\x00\x00\x00\x01", "tb/01/m\x00\x00\x00\x00\x00\x00\x00\x01", "po/\x00\x00\x00\x00\x00\x00\x00\x01"} {
		if _, ok := treebeard.SlotIndex(a); ok || treebeard.IsMetaAddr(a) {
			t.Errorf("%q taken for a tree's address", a)
		}
	}
}

// Small evictions (A=2, K=3) make blocks move between stash and trees
// within the contract's few operations.
var busy = treebeard.Options{A: 2, K: 3, Epoch: 200 * time.Microsecond}

// wide has two real blocks per bucket, so multi-path reads take two slots
// of the buckets several of their paths cross.
var wide = treebeard.Options{Z: 2, S: 3, A: 2, K: 3, Epoch: 200 * time.Microsecond}

func TestContract(t *testing.T) {
	withOptions := func(o treebeard.Options) kvtest.Config {
		c := cfg
		c.Options = o
		return c
	}
	for _, c := range []kvtest.Config{cfg, withOptions(busy), withOptions(wide)} {
		for _, st := range kvtest.Storages(t) {
			t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, c, st) })
		}
	}
}

// TestLinearizable: 16 clients mixing GET/SET/DEL, half of their requests
// on one hot key, with frequent evictions so blocks are handed over and
// acked while clients use them.
func TestLinearizable(t *testing.T) {
	for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Redis(), kvtest.Jittered(kvtest.Mem(), 2*time.Millisecond)} {
		t.Run(st.Name, func(t *testing.T) {
			s := kvtest.OpenStore(t, kvtest.Config{Protocol: "treebeard", Options: busy}, st)
			kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
		})
	}
	t.Run("Z=2", func(t *testing.T) {
		s := kvtest.OpenStore(t, kvtest.Config{Protocol: "treebeard", Options: wide}, kvtest.Mem())
		kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
	})
	// INCR, APPEND and SETNX among GET, SET and DEL: each is one access,
	// applied by the Stash shard to the block it holds.
	t.Run("mutations", func(t *testing.T) {
		s := kvtest.OpenStore(t, kvtest.Config{Protocol: "treebeard", Options: busy}, kvtest.Jittered(kvtest.Mem(), 2*time.Millisecond))
		kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.1, MutationFraction: 0.6})
	})
}

// gate holds the first eviction write of tree 0 once armed, until
// released: the first write of several buckets' slots (a path read's
// write holds only metadata until buckets are read S times).
type gate struct {
	backend.Backend
	armed   atomic.Bool
	held    chan struct{} // closed when a write is being held
	release chan struct{}
	once    sync.Once
}

func (g *gate) Write(ctx context.Context, items []backend.Item) error {
	if g.armed.Load() && slotsIn(items) > 7 {
		g.once.Do(func() {
			close(g.held)
			<-g.release
		})
	}
	return g.Backend.Write(ctx, items)
}

// WriteFenced is held as Write is.
func (g *gate) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if g.armed.Load() && slotsIn(items) > 7 {
		g.once.Do(func() {
			close(g.held)
			<-g.release
		})
	}
	return g.Backend.WriteFenced(ctx, f, items)
}

// TestWriteDuringEvictionSurvives: a block is handed to an eviction, a
// client overwrites it while the eviction is writing the tree, and the
// eviction acks the block. The stash must keep the new value (its access
// counter is not zero), and the stale copy in the tree must never be
// served, then or after later evictions (Sec. 5.2.2).
func TestWriteDuringEvictionSurvives(t *testing.T) {
	g := &gate{Backend: mem.New(), held: make(chan struct{}), release: make(chan struct{})}
	// One tree and one Stash shard: every stashed block joins every
	// eviction. A=4: the fourth path read triggers one. Z=1, S=6: no
	// bucket is reshuffled before it, so the first Write of several
	// buckets' slots is the eviction's.
	opts := treebeard.Options{Trees: 1, ORAMShards: 1, StashShards: 1, Z: 1, S: 6, A: 4, K: 8, Epoch: -1,
		TestingKnobs: treebeard.TestingKnobs{Seed: &[32]byte{1}}}
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "treebeard", Backend: g, Keys: kvtest.NewKeys(t),
		Capacity: 64, ValueSize: 32, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	mustPut(t, s, "k", "old") // read 1; "k" is in the stash
	g.armed.Store(true)
	for i := range 3 { // reads 2-4: the eviction starts and is held
		go s.Get(ctx, "other"+string(rune('a'+i)))
	}
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no eviction started after A path reads")
	}
	// The eviction holds "k"; overwrite it now. The Put's own path read
	// waits behind the eviction, so it returns after the ack. The Put has
	// reached the stash once the shard has planned its path read.
	planned := func() float64 {
		st := s.Stats()
		return kvtest.Stat(t, st, "real_reads") + kvtest.Stat(t, st, "fake_reads")
	}
	before := planned()
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "k", []byte("new")) }()
	kvtest.WaitFor(t, "the Put to reach the stash", func() bool { return planned() > before })
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := kvtest.Stat(t, s.Stats(), "evictions"); st < 1 {
		t.Fatalf("evictions = %v, want at least 1", st)
	}
	wantGet(t, s, "k", "new")
	for i := range 40 { // many more evictions: the stale copy stays dead
		mustPut(t, s, "filler"+string(rune('a'+i%26)), "x")
		wantGet(t, s, "k", "new")
	}
}

// flakySlots fails the next fails Reads of tree 0's slots.
type flakySlots struct {
	backend.Backend
	mu    sync.Mutex
	fails int
}

var errFlaky = errors.New("injected read failure")

func (b *flakySlots) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	layout := ringoram.Layout{Prefix: treebeard.TreePrefix(0)}
	b.mu.Lock()
	fail := false
	if _, _, ok := layout.ParseSlot(addrs[0]); ok && b.fails > 0 {
		b.fails, fail = b.fails-1, true
	}
	b.mu.Unlock()
	if fail {
		return nil, errFlaky
	}
	return b.Backend.Read(ctx, addrs)
}

// TestFailedReadIssuedAgain: storage fails a tree's slot Reads a few
// times; the requests still succeed, and on the Tap every failed Read is
// followed by the identical Read (Sec. 5.3.3: a retried path read reads
// the same slots as the attempt before it), after the Write it carried,
// if any, sent again with it.
func TestFailedReadIssuedAgain(t *testing.T) {
	fb := &flakySlots{Backend: mem.New()}
	log := &observe.MemoryLog{}
	opts := treebeard.Options{Trees: 1, ORAMShards: 1, A: 2, K: 3, Epoch: -1}
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "treebeard", Backend: fb, Keys: kvtest.NewKeys(t),
		Capacity: 64, ValueSize: 16, Options: opts, TapLog: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustPut(t, s, "k", "v")
	fb.mu.Lock()
	fb.fails = 5
	fb.mu.Unlock()
	for i := range 4 { // path reads, their evictions, and Gets of "k"
		mustPut(t, s, "other"+string(rune('a'+i)), "x")
		wantGet(t, s, "k", "v")
	}
	recs, failed := log.Records(), 0
	for i, r := range recs {
		if r.Op != observe.OpRead || !r.Err {
			continue
		}
		failed++
		next := i + 1
		for next < len(recs) && recs[next].Op == observe.OpWrite && i > 0 && slices.Equal(recs[next].Addrs, recs[i-1].Addrs) {
			next++ // the Write that went with the failed Read, again
		}
		if next == len(recs) || recs[next].Op != observe.OpRead || !slices.Equal(recs[next].Addrs, r.Addrs) {
			t.Fatalf("call %d: a failed slot Read was not followed by the same Read", r.Seq)
		}
	}
	if failed != 5 {
		t.Fatalf("%d failed Reads on the Tap; want 5", failed)
	}
	if got := kvtest.Stat(t, s.Stats(), "read_retries"); got != 5 {
		t.Fatalf("read_retries = %v, want 5", got)
	}
}

// slotsIn counts the slot addresses of tree 0 among items.
func slotsIn(items []backend.Item) int {
	layout, n := ringoram.Layout{Prefix: treebeard.TreePrefix(0)}, 0
	for _, it := range items {
		if _, _, ok := layout.ParseSlot(it.Addr); ok {
			n++
		}
	}
	return n
}

func mustPut(t *testing.T, s kv.Store, k, v string) {
	t.Helper()
	if err := s.Put(t.Context(), k, []byte(v)); err != nil {
		t.Fatalf("Put(%q): %v", k, err)
	}
}

func wantGet(t *testing.T, s kv.Store, k, want string) {
	t.Helper()
	got, ok, err := s.Get(t.Context(), k)
	if err != nil || !ok || string(got) != want {
		t.Fatalf("Get(%q) = %q, %v, %v; want %q", k, got, ok, err, want)
	}
}

// madeWith makes a journaled store over memory of capacity keys with
// options o, puts k=v and closes it, and returns what opens it again
// with other options, as a restart does.
func madeWith(t *testing.T, capacity int, o treebeard.Options) func(treebeard.Options) (kv.Store, error) {
	t.Helper()
	b, keys, journal := mem.New(), kvtest.NewKeys(t), t.TempDir()
	open := func(o treebeard.Options) (kv.Store, error) {
		b.Reopen()
		return kv.Open(t.Context(), kv.Config{Protocol: "treebeard", Backend: b, Keys: keys, Capacity: capacity, ValueSize: 16,
			Options: o, OpenJournal: kvtest.Journal(journal)})
	}
	s, err := open(o)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "k", "v")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return open
}

// wantMismatch fails t unless opening with o is refused with
// kv.ErrMismatch.
func wantMismatch(t *testing.T, open func(treebeard.Options) (kv.Store, error), o treebeard.Options, what string) {
	t.Helper()
	if s, err := open(o); !errors.Is(err, kv.ErrMismatch) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("%s: %v; want kv.ErrMismatch", what, err)
	}
}

// TestReopenWithOtherTrees: the trees are the store's layout; reopening
// with another number of trees, or of levels held in memory, is
// ErrMismatch and changes nothing, so reopening with the right options
// still serves the data; left to its default, the levels in memory are
// those the store was made with.
func TestReopenWithOtherTrees(t *testing.T) {
	open := madeWith(t, 64, treebeard.Options{Trees: 2, CachedLevels: 2})
	wantMismatch(t, open, treebeard.Options{Trees: 3}, "reopening 2 trees as 3")
	wantMismatch(t, open, treebeard.Options{Trees: 2, CachedLevels: 1}, "reopening 2 levels in memory as 1")
	s, err := open(treebeard.Options{Trees: 2, StashShards: 5}) // shards may change
	if err != nil {
		t.Fatalf("reopening with the right trees after a refused open: %v", err)
	}
	defer s.Close()
	wantGet(t, s, "k", "v")
	if got := kvtest.Stat(t, s.Stats(), "cached_levels"); got != 2 {
		t.Fatalf("reopened with the default, the store holds %v levels in memory; it was made with 2", got)
	}
}

// TestReopenKeepsBucketShape: a store made with other trees and another
// bucket shape than the defaults (as under older defaults) reopens with
// Trees, Z and S left to the defaults as it was made; a Z given that
// differs is ErrMismatch.
func TestReopenKeepsBucketShape(t *testing.T) {
	open := madeWith(t, 256, treebeard.Options{Trees: 3, Z: 2, S: 3})
	wantMismatch(t, open, treebeard.Options{Z: 3}, "reopening Z=2 as Z=3")
	s, err := open(treebeard.Options{})
	if err != nil {
		t.Fatalf("reopening with the defaults: %v", err)
	}
	defer s.Close()
	wantGet(t, s, "k", "v")
	st := s.Stats()
	if trees, z, s := kvtest.Stat(t, st, "trees"), kvtest.Stat(t, st, "bucket_z"), kvtest.Stat(t, st, "bucket_s"); trees != 3 || z != 2 || s != 3 {
		t.Fatalf("reopened with the defaults: %v trees, Z=%v, S=%v; the store was made with 3, Z=2, S=3", trees, z, s)
	}
}

// TestPrepare: a fresh store writes its trees at Prepare, once; without
// Prepare it would at its first access.
func TestPrepare(t *testing.T) {
	b := mem.New()
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "treebeard", Backend: b, Keys: kvtest.NewKeys(t), Capacity: 64, ValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := b.Len()
	if err := kv.Prepare(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	// The trees of 64/Trees/Z leaves (at least one): twice as many
	// buckets less one, of Z+S slots and a metadata record each; too
	// small to cache a level.
	trees, z, st := treebeard.DefaultTrees, treebeard.DefaultZ, treebeard.DefaultS
	leaves := max(1, 64/trees/z)
	if got, want := b.Len()-before, trees*(2*leaves-1)*(z+st+1); got != want {
		t.Fatalf("Prepare wrote %d addresses, want %d (every tree)", got, want)
	}
	writes := s.Stats().Backend
	if err := kv.Prepare(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Backend != writes {
		t.Fatal("a second Prepare touched storage")
	}
}
