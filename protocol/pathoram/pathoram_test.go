package pathoram

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

var contract = kvtest.Config{Protocol: "pathoram", Integrity: true, Durable: true, NamesKeys: true}

func TestMain(m *testing.M) { kvtest.Main(m) }

func TestContract(t *testing.T) {
	for _, st := range kvtest.Storages(t) {
		t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, contract, st) })
	}
}

func TestLinearizable(t *testing.T) {
	for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Redis()} {
		t.Run(st.Name, func(t *testing.T) {
			kvtest.CheckLinearizable(t, kvtest.OpenStore(t, contract, st), kvtest.LinOptions{Clients: 16})
		})
	}
	t.Run("mutations", func(t *testing.T) {
		kvtest.CheckLinearizable(t, kvtest.OpenStore(t, contract, kvtest.Mem()), kvtest.LinOptions{Clients: 16, MutationFraction: 0.6})
	})
}

// fixture is a store on an in-memory backend with the adversary's view
// logged, for tests that look at the calls.
type fixture struct {
	t       *testing.T
	mem     *mem.Backend
	keys    *seal.Keys
	log     *observe.MemoryLog
	journal string // the journal directory
	cfg     kv.Config
	s       kv.Store
}

func newFixture(t *testing.T, capacity, valueSize int, opts Options) *fixture {
	t.Helper()
	f := unopenedFixture(t, capacity, valueSize, opts)
	f.s = f.open(nil)
	return f
}

// unopenedFixture is newFixture before its store is opened, for a test to
// change its config first.
func unopenedFixture(t *testing.T, capacity, valueSize int, opts Options) *fixture {
	f := &fixture{t: t, mem: mem.New(), keys: kvtest.NewKeys(t), log: &observe.MemoryLog{}, journal: t.TempDir()}
	f.cfg = kv.Config{Protocol: "pathoram", Capacity: capacity, ValueSize: valueSize, Options: opts}
	return f
}

// open opens a store on the fixture's storage; mod may change its config.
func (f *fixture) open(mod func(*kv.Config)) kv.Store {
	f.t.Helper()
	s, err := f.tryOpen(mod)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) tryOpen(mod func(*kv.Config)) (kv.Store, error) {
	f.mem.Reopen()
	cfg := f.cfg
	cfg.Backend, cfg.Keys, cfg.TapLog = f.mem, f.keys, f.log
	if f.journal != "" {
		cfg.OpenJournal = kvtest.Journal(f.journal)
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := kv.Open(context.Background(), cfg)
	if err == nil {
		f.t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func (f *fixture) geometry() tree.Geometry { return tree.NewGeometry(f.cfg.Capacity) }

func (f *fixture) bucketSize() int {
	z := cmp.Or(f.cfg.Options.(Options).Z, DefaultZ)
	return tree.NewCodec(f.keys, z, f.cfg.ValueSize).BucketSize()
}

func (f *fixture) put(key, val string) {
	f.t.Helper()
	if err := f.s.Put(f.t.Context(), key, []byte(val)); err != nil {
		f.t.Fatalf("Put(%q): %v", key, err)
	}
}

func (f *fixture) want(key, val string) {
	f.t.Helper()
	got, ok, err := f.s.Get(f.t.Context(), key)
	if err != nil || !ok || string(got) != val {
		f.t.Fatalf("Get(%q) = %q, %v, %v; want %q", key, got, ok, err, val)
	}
}

// Cost per access, of every kind: one read and one write of the L+1
// buckets of a path, 2*(L+1)*BucketSize bytes (2*Z*(L+1) slots moved).
func TestCostPerOp(t *testing.T) {
	const capacity = 16
	f := newFixture(t, capacity, 40, Options{})
	ctx := t.Context()
	for i := range capacity - 1 {
		f.put(fmt.Sprint("k", i), "v")
	}
	L := f.geometry().L
	ops := []func() error{
		func() error { _, _, err := f.s.Get(ctx, "k1"); return err },
		func() error { _, _, err := f.s.Get(ctx, "missing"); return err },
		func() error { return f.s.Put(ctx, "k2", []byte("new value")) },
		func() error { return f.s.Put(ctx, "k-last", []byte("fills the store")) },
		func() error { return f.s.Delete(ctx, "missing") },
		func() error { return f.s.Delete(ctx, "k3") },
		func() error { return f.s.Put(ctx, "k3", []byte("back")) },
	}
	for i, op := range ops {
		before := f.s.Stats().Backend
		if err := op(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		checkCost(t, fmt.Sprint("op ", i), f.s.Stats().Backend.Sub(before), L, f.bucketSize())
	}
	// A new key into the full store: a full access, then ErrFull.
	before := f.s.Stats().Backend
	err := f.s.Put(ctx, "one-too-many", []byte("x"))
	if !errors.Is(err, kv.ErrFull) {
		t.Fatalf("Put into a full store: %v; want kv.ErrFull", err)
	}
	checkCost(t, "Put into a full store", f.s.Stats().Backend.Sub(before), L, f.bucketSize())
}

func checkCost(t *testing.T, what string, d observe.Counters, L, bucketSize int) {
	t.Helper()
	n := uint64(L + 1)
	if d.Calls != 2 || d.Reads != 1 || d.Writes != 1 || d.AddrsRead != n || d.AddrsWritten != n {
		t.Errorf("%s: %d calls (%d reads, %d writes), %d addresses read, %d written; want one read and one write of %d buckets",
			what, d.Calls, d.Reads, d.Writes, d.AddrsRead, d.AddrsWritten, n)
	}
	if want := 2 * n * uint64(bucketSize); d.Bytes() != want {
		t.Errorf("%s: %d bytes moved; want 2*(L+1)*BucketSize = %d", what, d.Bytes(), want)
	}
}

// The fresh tree is written in large batches, never bucket by bucket, and
// holds every bucket once.
func TestFreshTreeBatched(t *testing.T) {
	const batch = 64 << 10
	f := newFixture(t, 1024, 100, Options{BatchBytes: batch})
	g, size := f.geometry(), f.bucketSize()
	seen := map[string]bool{}
	writes := 0
	for _, r := range f.log.Records() {
		if r.Op != observe.OpWrite || r.Addrs[0] == kv.MetaAddr || durable.IsAnchorWrite(r) {
			continue
		}
		writes++
		total := 0
		for i, a := range r.Addrs {
			if _, ok := (tree.Layout{Prefix: treePrefix}).Bucket(a); !ok || seen[a] || r.Sizes[i] != size {
				t.Fatalf("write %d: address %q (%d bytes) is not a new bucket of %d bytes", r.Seq, a, r.Sizes[i], size)
			}
			seen[a] = true
			total += len(a) + r.Sizes[i]
		}
		if total > batch+size+len(treePrefix)+8 {
			t.Errorf("write %d carries %d bytes; batches are about %d", r.Seq, total, batch)
		}
	}
	total := int(g.Buckets()) * (size + len(treePrefix) + 8)
	if uint64(len(seen)) != g.Buckets() || writes > total/batch+1 {
		t.Fatalf("fresh store wrote %d of %d buckets in %d writes; want all, in about %d", len(seen), g.Buckets(), writes, total/batch+1)
	}
}

func TestOptions(t *testing.T) {
	for _, bad := range []any{Options{Z: -1}, Options{Z: maxZ + 1}, "Z=4", 4} {
		if _, err := kv.ResolveOptions[Options]("pathoram", kv.Env{Options: bad, Capacity: 16}); err == nil {
			t.Errorf("options %#v accepted", bad)
		}
	}
	for _, ok := range []any{nil, Options{}, &Options{}, (*Options)(nil)} {
		o, err := kv.ResolveOptions[Options]("pathoram", kv.Env{Options: ok, Capacity: 16})
		if err != nil || o.Z != DefaultZ || o.BatchBytes != tree.DefaultBatchBytes {
			t.Errorf("options %#v: %+v, %v; want the defaults", ok, o, err)
		}
	}
	f := newFixture(t, 16, 16, Options{Z: 2})
	f.put("a", "b")
	if got := kvtest.Stat(t, f.s.Stats(), "bucket_bytes"); int(got) != tree.NewCodec(f.keys, 2, 16).BucketSize() {
		t.Errorf("Z=2: bucket of %v bytes; want 2 slots", got)
	}
}

// A store reopened with another Z is refused with ErrMismatch, and the
// refusal keeps its data.
func TestReopenOtherZ(t *testing.T) {
	f := newFixture(t, 16, 16, Options{})
	f.put("a", "b")
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := f.tryOpen(func(c *kv.Config) { c.Options = Options{Z: 5} })
	if !errors.Is(err, kv.ErrMismatch) {
		t.Fatalf("reopening a Z=4 store with Z=5: %v; want kv.ErrMismatch", err)
	}
	f.s = f.open(nil)
	f.want("a", "b")
}

// rawStore opens a pathoram store on b with its own journal in dir, so a
// test can crash it: the journal dies as with the process (nothing
// pending written, no checkpoint), storage keeps what it received.
func rawStore(t *testing.T, b backend.Backend, keys *seal.Keys, dir string, fresh bool) (*store, *journal.Journal) {
	t.Helper()
	j, err := journal.Open(dir, keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := open(t.Context(), kv.Env{Backend: b, Keys: keys, Capacity: 64, ValueSize: 16, Fresh: fresh, Journal: j})
	if err != nil {
		j.Crash()
		t.Fatal(err)
	}
	return st.(*store), j
}

// A crash loses nothing acknowledged: the accesses since the last
// checkpoint are replayed from the journal, across several crashes and a
// checkpoint between them, and a write-back that failed before the crash
// is redone from its journal record.
func TestCrashRecovers(t *testing.T) {
	fb, keys, dir := &flaky{Backend: mem.New()}, kvtest.NewKeys(t), t.TempDir()
	ctx := t.Context()
	s, j := rawStore(t, fb, keys, dir, true)
	want := kvtest.Model{}
	for i := range 20 {
		want.Put(t, s, fmt.Sprint("k", i), fmt.Sprint("v", i))
	}
	j.Crash()
	s, j = rawStore(t, fb, keys, dir, false)
	want.Check(t, s, "after the crash")
	s.log.SetEvery(5) // a checkpoint every 5 accesses from here
	for i := range 12 {
		want.Put(t, s, fmt.Sprint("k", i), fmt.Sprint("w", i))
	}
	// A Put whose write-back fails after its record is durable: its effect
	// is redone at recovery.
	fb.failNext = true
	if err := s.Put(ctx, "k0", []byte("redone")); err == nil {
		t.Fatal("a Put whose write-back failed succeeded")
	}
	want["k0"] = []byte("redone")
	j.Crash()
	s, j = rawStore(t, fb, keys, dir, false)
	defer j.Close()
	want.Check(t, s, "after the second crash")
}

// A bulk load cut short by a crash leaves an empty store that works,
// never one that cannot open.
func TestCrashDuringLoad(t *testing.T) {
	keys, dir := kvtest.NewKeys(t), t.TempDir()
	fb := &flaky{Backend: mem.New()}
	s, j := rawStore(t, fb, keys, dir, true)
	fb.failNext = true // the load's first tree write
	_, err := s.Load(t.Context(), func(yield func(string, []byte) bool) { yield("a", []byte("1")) })
	if err == nil {
		t.Fatal("a Load whose writes failed succeeded")
	}
	j.Crash()
	s, j = rawStore(t, fb, keys, dir, false)
	defer j.Close()
	if _, ok, err := s.Get(t.Context(), "a"); err != nil || ok {
		t.Fatalf("Get after an interrupted load: %v, %v; want an empty store", ok, err)
	}
	if err := s.Put(t.Context(), "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
}

// A bucket replayed from an older write is detected by its version.
func TestReplayedBucket(t *testing.T) {
	f := newFixture(t, 16, 16, Options{})
	f.put("a", "old")
	root := (tree.Layout{Prefix: treePrefix}).Addr(0)
	old := readAll(t, f.mem, root)[root]
	f.put("a", "new") // every access rewrites the root
	if err := f.mem.Write(t.Context(), []backend.Item{{Addr: root, Value: old}}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "missing"} {
		if _, _, err := f.s.Get(t.Context(), key); !errors.Is(err, kv.ErrTampered) {
			t.Fatalf("Get(%q) with the root replayed from an older write: %v; want kv.ErrTampered", key, err)
		}
	}
}

// readAll returns what storage holds under prefix (reopening the backend
// if a closed store closed it).
func readAll(t *testing.T, b *mem.Backend, prefix string) map[string][]byte {
	t.Helper()
	b.Reopen()
	var addrs []string
	if err := b.Scan(t.Context(), prefix, func(a string) error { addrs = append(addrs, a); return nil }); err != nil {
		t.Fatal(err)
	}
	vals, err := b.Read(t.Context(), addrs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for i, a := range addrs {
		out[a] = vals[i]
	}
	return out
}

// flaky fails the next write it is told to.
type flaky struct {
	backend.Backend
	failNext bool
}

func (b *flaky) Write(ctx context.Context, items []backend.Item) error {
	if b.failNext {
		b.failNext = false
		return errors.New("injected write failure")
	}
	return b.Backend.Write(ctx, items)
}

// A failed write-back is retried before the next access reads anything,
// and the failed Put's effect is kept.
func TestWriteBackRetried(t *testing.T) {
	fb := &flaky{Backend: mem.New()}
	log := &observe.MemoryLog{}
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "pathoram", Backend: fb, Keys: kvtest.NewKeys(t),
		Capacity: 16, ValueSize: 16, TapLog: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(t.Context(), "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	fb.failNext = true
	if err := s.Put(t.Context(), "a", []byte("2")); err == nil {
		t.Fatal("Put whose write-back failed reported success")
	}
	log.Reset()
	got, ok, err := s.Get(t.Context(), "a")
	if err != nil || !ok || string(got) != "2" {
		t.Fatalf("Get after a failed write-back = %q, %v, %v; want \"2\"", got, ok, err)
	}
	recs := log.Records()
	if len(recs) != 3 || recs[0].Op != observe.OpWrite || recs[1].Op != observe.OpRead || recs[2].Op != observe.OpWrite {
		t.Fatalf("calls after a failed write-back: %d; want the retried write, then a read and a write", len(recs))
	}
}

// TestPowerLoss: with storage syncing only at checkpoints, a power cut
// loses nothing acknowledged (the journal redoes what storage lost).
func TestPowerLoss(t *testing.T) {
	kvtest.CheckPowerLoss(t, open, kv.Env{Capacity: 64, ValueSize: 16})
}
