package ringoram

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

var defaults = Params{Z: PaperZ, S: PaperS}

func TestLayout(t *testing.T) {
	l := Layout{Prefix: "t3/"}
	seen := map[string]bool{}
	for _, b := range []uint64{0, 1, 255, 256, 1 << 40, ^uint64(0)} {
		m := l.MetaAddr(b)
		if got, ok := l.ParseMeta(m); !ok || got != b || seen[m] {
			t.Fatalf("ParseMeta(MetaAddr(%d)) = %d, %v (or a duplicate address)", b, got, ok)
		}
		if _, _, ok := l.ParseSlot(m); ok {
			t.Fatalf("metadata address of %d parses as a slot", b)
		}
		seen[m] = true
		for _, s := range []int{0, 1, 6, 63} {
			a := l.SlotAddr(b, s)
			gb, gs, ok := l.ParseSlot(a)
			if !ok || gb != b || gs != s || seen[a] || !bytes.HasPrefix([]byte(a), []byte(l.bucketAddr(b))) {
				t.Fatalf("ParseSlot(SlotAddr(%d, %d)) = %d, %d, %v (or a duplicate, or not under bucketAddr)", b, s, gb, gs, ok)
			}
			if _, ok := l.ParseMeta(a); ok {
				t.Fatalf("slot address %q parses as metadata", a)
			}
			seen[a] = true
		}
	}
	for _, bad := range []string{"", "t3/", "t4/m12345678", "t3/m1234567", "t3/x12345678", "t3/s12345678", "t3/s1234567890", "t3/s1234567"} {
		if _, ok := l.ParseMeta(bad); ok {
			t.Errorf("ParseMeta(%q) accepted", bad)
		}
		if _, _, ok := l.ParseSlot(bad); ok {
			t.Errorf("ParseSlot(%q) accepted", bad)
		}
	}
}

func TestNewTreeValidates(t *testing.T) {
	f := newFixture(t, 3, defaults, 1)
	for _, p := range []Params{{0, 6}, {1, 0}, {4, 61}, {-1, 6}} {
		cfg := f.cfg
		cfg.Params = p
		if _, err := NewDriver(cfg); err == nil {
			t.Errorf("NewTree accepted %+v", p)
		}
	}
	for _, mod := range []func(*Config){
		func(c *Config) { c.Backend = nil },
		func(c *Config) { c.Keys = nil },
		func(c *Config) { c.Geometry.L = MaxLevels + 1 },
		func(c *Config) { c.ValueSize = -1 },
	} {
		cfg := f.cfg
		mod(&cfg)
		if _, err := NewDriver(cfg); err == nil {
			t.Errorf("NewTree accepted %+v", cfg)
		}
	}
	cfg := f.cfg
	cfg.Params, cfg.Seed = Params{Z: 4, S: 60}, nil
	if _, err := NewDriver(cfg); err != nil {
		t.Errorf("NewDriver(Z+S = 64, no Seed): %v", err)
	}
	if len(f.log.Records()) != 0 {
		t.Error("NewTree made backend calls")
	}
}

func TestRoundTrip(t *testing.T) {
	for _, p := range []Params{defaults, {Z: 3, S: 4}} {
		f := newFixture(t, 5, p, 2)
		blocks := f.load(40)
		for _, b := range blocks {
			res := f.read(PathRead{Leaf: b.leaf, Want: b.ID, Real: true}, PathRead{Leaf: f.r.Uint64N(32)})
			if !res[0].Found || res[0].Block.ID != b.ID || !bytes.Equal(res[0].Block.Value, b.Value) {
				t.Fatalf("%+v: read of a block on its path: %+v", p, res[0])
			}
			if res[1].Found {
				t.Fatalf("%+v: a fake read returned %+v", p, res[1])
			}
			if got := f.read(PathRead{Leaf: b.leaf, Want: b.ID, Real: true}); got[0].Found {
				t.Fatalf("%+v: a block read once is still in the tree", p)
			}
		}
		if s := f.tr.Stats(); s.PathReads != uint64(3*len(blocks)) || s.MultiReads != uint64(2*len(blocks)) {
			t.Fatalf("stats %+v after %d reads", s, 3*len(blocks))
		}
		if got, err := f.tr.ReadPaths(f.ctx, nil); got != nil || err != nil || len(f.fresh()) != 0 {
			t.Fatalf("empty ReadPaths: %v, %v, or backend calls", got, err)
		}
	}
}

// A block is found only on its own path, and two requests for it serve
// the first.
func TestReadPathsMisses(t *testing.T) {
	f := newFixture(t, 4, defaults, 3)
	blocks := f.load(10)
	b := blocks[0]
	other := b.leaf ^ (f.tr.g.Leaves() - 1) // shares only the root with b's path
	res := f.read(PathRead{Leaf: other, Want: b.ID, Real: true})
	if res[0].Found && b.bucket != 0 {
		t.Fatal("a block was found on another leaf's path")
	}
	res = f.read(PathRead{Leaf: b.leaf, Want: b.ID, Real: true}, PathRead{Leaf: b.leaf, Want: b.ID, Real: true})
	if !res[0].Found || res[1].Found {
		t.Fatalf("two requests for one block: found %v, %v; want the first only", res[0].Found, res[1].Found)
	}
	if _, err := f.tr.ReadPaths(f.ctx, []PathRead{{Leaf: f.tr.g.Leaves()}}); err == nil {
		t.Fatal("read of a leaf outside the tree succeeded")
	}
}

// Every ReadPaths of a tree with a copy of its metadata is one slot Read
// (with the slots of an early reshuffle after the path's) and one Write:
// the auditor of every fixture checks the shapes; here many random
// batches run against it, with overlapping paths.
func TestReadPathsShape(t *testing.T) {
	f := newFixture(t, 6, defaults, 4)
	blocks := f.load(60)
	for n := range 200 {
		var reqs []PathRead
		for range 1 + f.r.IntN(8) {
			reqs = append(reqs, PathRead{Leaf: f.r.Uint64N(f.tr.g.Leaves())})
		}
		if n < len(blocks) {
			reqs = append(reqs, PathRead{Leaf: blocks[n].leaf, Want: blocks[n].ID, Real: true})
		}
		res := f.read(reqs...)
		if n < len(blocks) && !res[len(res)-1].Found {
			t.Fatalf("batch %d: block not found on its path", n)
		}
	}
	// Overlapping paths read their shared buckets once.
	before := len(f.log.Records())
	f.read(PathRead{Leaf: 0}, PathRead{Leaf: 1}, PathRead{Leaf: 1})
	buckets := map[uint64]bool{}
	for _, a := range f.log.Records()[before].Addrs {
		b, _, _ := f.cfg.Layout.ParseSlot(a)
		buckets[b] = true
	}
	if n := len(buckets); n != 6+2 {
		t.Fatalf("reads of leaves 0, 1, 1 read slots of %d buckets; want 8 (levels 0-5 shared)", n)
	}
	if s := f.tr.Stats(); s.Reshuffles == 0 {
		t.Fatal("200 batches caused no reshuffle")
	}
}

// The root is reshuffled after exactly S reads, every bucket of a path
// read S times together, and a reshuffled bucket still serves its block.
func TestEarlyReshuffle(t *testing.T) {
	f := newFixture(t, 3, defaults, 5)
	placed := make([][]Block, f.tr.g.Buckets())
	blk := randomBlock(f.r, 32)
	const leaf = 5
	leafBucket := f.tr.g.BucketAt(leaf, 3)
	placed[leafBucket] = []Block{{Block: blk, Leaf: leaf}}
	f.init(placed)
	for n := 1; n <= 2*defaults.S; n++ {
		f.read(PathRead{Leaf: leaf})
		recs := f.log.Records()
		if reshuffled := len(recs[len(recs)-1].Addrs) > 4; reshuffled != (n%defaults.S == 0) {
			t.Fatalf("read %d: reshuffle %v", n, reshuffled)
		}
		if m := f.peek(0); m.Count != n%defaults.S {
			t.Fatalf("read %d: root count %d", n, m.Count)
		}
	}
	if s := f.tr.Stats(); s.Reshuffles != 2*4 || s.BucketsWritten != f.tr.g.Buckets()+8 {
		t.Fatalf("stats %+v; want 8 reshuffles", s)
	}
	res := f.read(PathRead{Leaf: leaf, Want: blk.ID, Real: true})
	if !res[0].Found || !bytes.Equal(res[0].Block.Value, blk.Value) {
		t.Fatal("the reshuffled bucket lost its block")
	}
	// Reads of other leaves count towards the shared buckets only: the
	// root has been read once since its reshuffle, the rest of the path
	// to 7 (buckets 2, 6, 14) at most once.
	for range defaults.S - 2 {
		f.read(PathRead{Leaf: 0})
	}
	before := len(f.log.Records())
	f.read(PathRead{Leaf: 7}) // the root's S-th read since the last reshuffle
	recs := f.log.Records()[before:]
	if len(recs) != 2 || len(recs[0].Addrs) != 4+1 {
		t.Fatalf("%d calls, the first of %d slots; want a Read of the path's 4 and the root's one to reshuffle (Z=1), and a Write", len(recs), len(recs[0].Addrs))
	}
	if b, _, _ := f.cfg.Layout.ParseSlot(recs[0].Addrs[4]); b != 0 {
		t.Fatalf("the reshuffle's slot is of bucket %d, want the root's", b)
	}
}

func TestEvictionOrder(t *testing.T) {
	f := newFixture(t, 4, defaults, 6)
	f.init(nil)
	var i uint64
	for _, k := range []int{3, 5, 1, 16, 7} {
		leaves := f.tr.EvictionLeaves(k)
		for j, leaf := range leaves {
			if leaf != f.tr.g.ReverseLexLeaf(i+uint64(j)) {
				t.Fatalf("eviction %d of %d: leaf %d; want ReverseLexLeaf(%d)", j, k, leaf, i+uint64(j))
			}
		}
		f.evict(k, nil) // the auditor checks the union of exactly these leaves is rewritten
		i += uint64(k)
	}
	if s := f.tr.Stats(); s.Evictions != 5 || s.EvictedPaths != i {
		t.Fatalf("stats %+v", s)
	}
	if _, err := f.tr.Evict(f.ctx, 0, nil); err == nil {
		t.Fatal("Evict(0) succeeded")
	}
	if _, err := f.tr.Evict(f.ctx, 1, []Block{{Leaf: 16}}); err == nil {
		t.Fatal("eviction of a block for a leaf outside the tree succeeded")
	}
	if _, err := f.tr.Evict(f.ctx, 1, []Block{{Block: tree.Block{Value: make([]byte, 33)}}}); err == nil {
		t.Fatal("eviction of a block over the value size succeeded")
	}
	if len(f.fresh()) != 0 {
		t.Fatal("refused evictions made backend calls")
	}
}

func TestEvictPlacement(t *testing.T) {
	for _, p := range []Params{defaults, {Z: 2, S: 3}} {
		f := newFixture(t, 5, p, 7)
		inTree := f.load(30)
		// Read some blocks out; the rest must keep their buckets.
		var stash []Block
		for _, b := range inTree[:10] {
			if res := f.read(PathRead{Leaf: b.leaf, Want: b.ID, Real: true}); !res[0].Found {
				t.Fatal("block not found")
			}
			stash = append(stash, Block{Block: b.Block, Leaf: f.r.Uint64N(f.tr.g.Leaves())})
		}
		for range 40 {
			stash = append(stash, Block{Block: randomBlock(f.r, 32), Leaf: f.r.Uint64N(f.tr.g.Leaves())})
		}
		leaves := f.tr.EvictionLeaves(6)
		union := f.tr.g.Union(leaves, nil)
		where := f.evict(6, stash)
		full := func(b uint64) bool { return len(f.holds(b)) == p.Z }
		for _, b := range inTree[10:] { // still on its path, as deep as it can go
			at := f.find(b.ID, b.leaf)
			if at != b.bucket && index(union, b.bucket) < 0 {
				t.Fatalf("%+v: a block outside the evicted paths moved from bucket %d to %d", p, b.bucket, at)
			}
			for _, deeper := range f.tr.g.Path(b.leaf, nil)[f.tr.g.Level(at)+1:] {
				if index(union, deeper) >= 0 && !full(deeper) {
					t.Fatalf("%+v: block for leaf %d stayed in %d although bucket %d had room", p, b.leaf, at, deeper)
				}
			}
		}
		var placedN int
		for j, b := range stash {
			path := f.tr.g.Path(b.Leaf, nil)
			if where[j] >= 0 {
				placedN++
				at := uint64(where[j])
				if !f.tr.g.OnPath(at, b.Leaf) || index(union, at) < 0 || !slices.Contains(f.holds(at), b.Block.ID) {
					t.Fatalf("%+v: block for leaf %d placed in bucket %d (union %v)", p, b.Leaf, at, union)
				}
				path = path[f.tr.g.Level(at)+1:]
			}
			for _, deeper := range path { // every bucket it could have gone to instead
				if index(union, deeper) >= 0 && !full(deeper) {
					t.Fatalf("%+v: block for leaf %d went to %d although bucket %d had room", p, b.Leaf, where[j], deeper)
				}
			}
		}
		if placedN == 0 || placedN == len(stash) {
			t.Fatalf("%+v: %d of %d stash blocks placed; want some but not all", p, placedN, len(stash))
		}
		for j, b := range stash {
			if where[j] >= 0 {
				res := f.read(PathRead{Leaf: b.Leaf, Want: b.Block.ID, Real: true})
				if !res[0].Found || !bytes.Equal(res[0].Block.Value, b.Block.Value) {
					t.Fatalf("%+v: evicted block not found on its leaf", p)
				}
			}
		}
	}
}

// An eviction moves the blocks it reads as deep as their leaves allow
// (Ring ORAM's EvictPath), here from the root to the leaf bucket, and the
// block is still served there.
func TestEvictionMovesBlocksDown(t *testing.T) {
	f := newFixture(t, 3, defaults, 11)
	placed := make([][]Block, f.tr.g.Buckets())
	x := Block{Block: randomBlock(f.r, 32), Leaf: 6}
	placed[0] = []Block{x}
	f.init(placed)
	f.evict(int(f.tr.g.Leaves()), nil) // every path
	if at, want := f.find(x.Block.ID, x.Leaf), f.tr.g.BucketAt(x.Leaf, f.tr.g.L); at != want {
		t.Fatalf("block in bucket %d after evicting every path; want its leaf bucket %d", at, want)
	}
	if res := f.read(PathRead{Leaf: x.Leaf, Want: x.Block.ID, Real: true}); !res[0].Found || !bytes.Equal(res[0].Block.Value, x.Block.Value) {
		t.Fatal("moved block not served")
	}
}

func TestForget(t *testing.T) {
	f := newFixture(t, 2, defaults, 8)
	placed := make([][]Block, f.tr.g.Buckets())
	x, y := randomBlock(f.r, 32), randomBlock(f.r, 32)
	const leaf = 2
	b := f.tr.g.BucketAt(leaf, 2)
	placed[b] = []Block{{Block: x, Leaf: leaf}}
	f.init(placed)
	f.tr.Forget(b, x.ID)
	f.tr.Forget(b, x.ID)
	f.tr.Forget(f.tr.g.Buckets(), x.ID) // outside the tree: nothing
	if st := f.tr.State(); len(st.Stale) != 1 || st.Stale[0] != (StaleEntry{Bucket: b, ID: x.ID}) {
		t.Fatalf("stale entries %+v", st.Stale)
	}
	xSlot := f.peek(b).Entries[0].Slot
	if res := f.read(PathRead{Leaf: leaf, Want: x.ID, Real: true}); res[0].Found {
		t.Fatal("a forgotten block was returned")
	}
	recs := f.log.Records()
	if _, s, _ := f.cfg.Layout.ParseSlot(recs[len(recs)-2].Addrs[2]); s == int(xSlot) {
		t.Fatal("a path read read the forgotten block's slot as a dummy")
	}
	// The eviction frees the slot: y, for the same leaf, takes bucket b.
	where := f.evict(4, []Block{{Block: y, Leaf: leaf}})
	if where[0] != int64(b) || len(f.tr.State().Stale) != 0 {
		t.Fatalf("y placed in %d, stale %+v; want bucket %d with the stale copy dropped", where[0], f.tr.State().Stale, b)
	}
	if ids := f.holds(b); len(ids) != 1 || ids[0] != y.ID {
		t.Fatalf("bucket %d holds %x; want y only", b, ids)
	}
}

// A stale copy in a bucket being reshuffled is dropped too.
func TestForgetReshuffle(t *testing.T) {
	f := newFixture(t, 1, Params{Z: 1, S: 2}, 9)
	placed := make([][]Block, 3)
	x := randomBlock(f.r, 32)
	placed[0] = []Block{{Block: x}}
	f.init(placed)
	f.tr.Forget(0, x.ID)
	f.read(PathRead{Leaf: 0})
	f.read(PathRead{Leaf: 1}) // the root's second read: reshuffled
	if len(f.holds(0)) != 0 || len(f.peek(0).Entries) != 1 || f.peek(0).Entries[0].Present || len(f.tr.State().Stale) != 0 {
		t.Fatalf("root after reshuffle: %+v, stale %+v", f.peek(0), f.tr.State().Stale)
	}
}

func TestTamper(t *testing.T) {
	type setup struct {
		f *fixture
		b placedBlock
	}
	prepare := func(t *testing.T) setup {
		f := newFixture(t, 3, defaults, 10)
		blocks := f.load(6)
		return setup{f, blocks[0]}
	}
	readIt := func(s setup) error {
		_, err := s.f.tr.ReadPaths(s.f.ctx, []PathRead{{Leaf: s.b.leaf, Want: s.b.ID, Real: true}})
		return err
	}
	evictAll := func(s setup) error {
		_, err := s.f.tr.Evict(s.f.ctx, 8, nil)
		return err
	}
	l := testLayout
	for _, tc := range []struct {
		name   string
		tamper func(s setup) (undo func())
		op     func(s setup) error
	}{
		{"flipped byte in the wanted slot", func(s setup) func() {
			addr := l.SlotAddr(s.b.bucket, int(s.f.peek(s.b.bucket).Entries[0].Slot))
			return flip(s.f, addr)
		}, readIt},
		{"flipped byte in a real slot, evicted", func(s setup) func() {
			return flip(s.f, l.SlotAddr(s.b.bucket, int(s.f.peek(s.b.bucket).Entries[0].Slot)))
		}, evictAll},
		{"flipped byte in metadata", func(s setup) func() { return flip(s.f, l.MetaAddr(0)) }, readIt},
		{"slots swapped between buckets", func(s setup) func() {
			other := s.f.tr.g.BucketAt(s.b.leaf^1, 3)
			var undo []func()
			for i := range defaults.slots() {
				undo = append(undo, put(s.f, l.SlotAddr(s.b.bucket, i), s.f.rawGet(l.SlotAddr(other, i))))
			}
			return func() {
				for _, u := range undo {
					u()
				}
			}
		}, readIt},
		{"slot moved within a bucket", func(s setup) func() {
			slot := int(s.f.peek(s.b.bucket).Entries[0].Slot)
			return put(s.f, l.SlotAddr(s.b.bucket, slot), s.f.rawGet(l.SlotAddr(s.b.bucket, (slot+1)%7)))
		}, readIt},
		{"deleted metadata", func(s setup) func() { return del(s.f, l.MetaAddr(s.b.bucket)) }, readIt},
		{"deleted slot", func(s setup) func() {
			return del(s.f, l.SlotAddr(s.b.bucket, int(s.f.peek(s.b.bucket).Entries[0].Slot)))
		}, readIt},
		{"truncated metadata", func(s setup) func() {
			old := s.f.rawGet(l.MetaAddr(0))
			return put(s.f, l.MetaAddr(0), old[:len(old)-1])
		}, readIt},
		{"replayed metadata", func(s setup) func() {
			old := s.f.rawGet(l.MetaAddr(0))
			s.f.read(PathRead{Leaf: 0})
			return put(s.f, l.MetaAddr(0), old)
		}, readIt},
		{"replayed bucket after a rewrite", func(s setup) func() {
			var old [][]byte
			for i := range defaults.slots() {
				old = append(old, s.f.rawGet(l.SlotAddr(0, i)))
			}
			s.f.evict(1, nil)
			var undo []func()
			for i, v := range old {
				undo = append(undo, put(s.f, l.SlotAddr(0, i), v))
			}
			return func() {
				for _, u := range undo {
					u()
				}
			}
		}, readIt},
		{"metadata mapping a block off its bucket's path", func(s setup) func() {
			// Sealed with the key, as only a bug could write it: the
			// check is the Tree's, not the seal's.
			m, addr := s.f.peek(s.b.bucket), l.MetaAddr(s.b.bucket)
			m.Entries[0].Leaf = s.b.leaf ^ (s.f.tr.g.Leaves() - 1)
			return put(s.f, addr, s.f.tr.keys.Seal(nil, []byte(addr), m.appendPlain(nil)))
		}, readIt},
		{"metadata of another bucket", func(s setup) func() {
			return put(s.f, l.MetaAddr(s.b.bucket), s.f.rawGet(l.MetaAddr(s.f.tr.g.BucketAt(s.b.leaf^1, 3))))
		}, readIt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := prepare(t)
			undo := tc.tamper(s)
			s.f.restart() // storage's metadata is read, not the Tree's copy
			before := s.f.tr.State()
			if err := tc.op(s); !errors.Is(err, seal.ErrTampered) {
				t.Fatalf("error %v; want seal.ErrTampered", err)
			}
			if after := s.f.tr.State(); !slices.Equal(before.Versions, after.Versions) || before.Evictions != after.Evictions {
				t.Fatal("a failed operation changed the trusted state")
			}
			undo()
			s.f.fresh()
			if err := tc.op(s); err != nil {
				t.Fatalf("after undoing the tampering: %v", err)
			}
		})
	}
}

// TestColdMetadataOpenedInParallel: a restarted tree's eviction whose
// union holds more metadata records than one goroutine opens
// (metasPerWorker) opens them on several goroutines, none writing what
// another does (run with -race), and fails with seal.ErrTampered when
// the last record read has a flipped byte; once it is undone, the
// eviction reads and keeps every record of its union.
func TestColdMetadataOpenedInParallel(t *testing.T) {
	f := newFixture(t, 10, defaults, 14)
	f.init(nil)
	f.restart()
	union := f.tr.g.Union(f.tr.EvictionLeaves(200), nil)
	if len(union) < 2*metasPerWorker {
		t.Fatalf("the eviction's union has %d buckets; want at least %d, for more than one goroutine", len(union), 2*metasPerWorker)
	}
	undo := flip(f, testLayout.MetaAddr(union[len(union)-1]))
	if _, err := f.tr.Evict(f.ctx, 200, nil); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("error %v; want seal.ErrTampered", err)
	}
	undo()
	f.restart()
	f.fresh()
	f.evict(200, nil)
	if got := f.tr.Stats().MetaReads; got != uint64(len(union)) {
		t.Fatalf("the eviction read %d metadata records; want its union's %d", got, len(union))
	}
}

func flip(f *fixture, addr string) func() {
	old := f.rawGet(addr)
	v := bytes.Clone(old)
	v[len(v)/2] ^= 0x10
	f.rawPut(addr, v)
	return func() { f.rawPut(addr, old) }
}

func put(f *fixture, addr string, v []byte) func() {
	old := f.rawGet(addr)
	f.rawPut(addr, v)
	return func() { f.rawPut(addr, old) }
}

func del(f *fixture, addr string) func() {
	old := f.rawGet(addr)
	if err := f.mem.Delete(f.ctx, []string{addr}); err != nil {
		f.t.Fatal(err)
	}
	return func() { f.rawPut(addr, old) }
}

// failing fails every Write while armed.
type failing struct {
	backend.Backend
	armed bool
}

var errInjected = errors.New("injected write failure")

func (b *failing) Write(ctx context.Context, items []backend.Item) error {
	if b.armed {
		return errInjected
	}
	return b.Backend.Write(ctx, items)
}

// WriteFenced fails as Write does.
func (b *failing) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if b.armed {
		return errInjected
	}
	return b.Backend.WriteFenced(ctx, f, items)
}

// A failed Write changes nothing in memory: the same operations succeed
// once storage works again.
func TestFailedWriteChangesNothing(t *testing.T) {
	f := newFixture(t, 3, defaults, 11)
	blocks := f.load(5)
	fb := &failing{Backend: f.cfg.Backend}
	f.tr.b = fb
	fb.armed = true
	before := f.tr.State()
	if _, err := f.tr.ReadPaths(f.ctx, []PathRead{{Leaf: blocks[0].leaf, Want: blocks[0].ID, Real: true}}); !errors.Is(err, errInjected) {
		t.Fatalf("ReadPaths: %v", err)
	}
	if _, err := f.tr.Evict(f.ctx, 3, nil); !errors.Is(err, errInjected) {
		t.Fatalf("Evict: %v", err)
	}
	if after := f.tr.State(); !slices.Equal(before.Versions, after.Versions) || after.Evictions != 0 {
		t.Fatal("failed operations changed the trusted state")
	}
	if err := f.tr.Init(f.ctx, nil); !errors.Is(err, errInjected) {
		t.Fatalf("Init: %v", err)
	}
	fb.armed = false
	f.fresh()
	f.aud = newAuditor(f.cfg.Layout, f.cfg.Geometry, defaults, f.tr.codec.SlotSize())
	// The failed Writes (Init's covered every bucket) dropped the Tree's
	// copies of their metadata: storage may hold them or not, so the next
	// read reads and checks them.
	if res := f.read(PathRead{Leaf: blocks[0].leaf, Want: blocks[0].ID, Real: true}); !res[0].Found {
		t.Fatal("block lost after a failed read")
	}
	if f.tr.EvictionLeaves(1)[0] != 0 {
		t.Fatal("a failed eviction advanced the eviction order")
	}
}

// flaky fails the next fails Reads that hold a slot, and records every
// Read it is asked for, failed or not: what storage may have seen.
type flaky struct {
	backend.Backend
	l     Layout
	fails int
	reads [][]string
}

func (b *flaky) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	b.reads = append(b.reads, slices.Clone(addrs))
	if _, _, slot := b.l.ParseSlot(addrs[0]); slot && b.fails > 0 {
		b.fails--
		return nil, errInjected
	}
	return b.Backend.Read(ctx, addrs)
}

// slotReads returns the Reads of slots among those recorded.
func (b *flaky) slotReads() [][]string {
	var out [][]string
	for _, r := range b.reads {
		if _, _, ok := b.l.ParseSlot(r[0]); ok {
			out = append(out, r)
		}
	}
	return out
}

// A slot Read that storage fails is issued again unchanged until it
// succeeds (Treebeard Sec. 5.3.3), by a multi-path read and by an
// eviction: storage sees the same slots again, never a wanted block's
// slot beside other dummies.
func TestFailedSlotReadIssuedAgainUnchanged(t *testing.T) {
	f := newFixture(t, 5, defaults, 13)
	blocks := f.load(20)
	fb := &flaky{Backend: f.cfg.Backend, l: f.cfg.Layout, fails: 3}
	f.tr.b = fb
	b := blocks[0]
	res, err := f.tr.ReadPaths(f.ctx, []PathRead{{Leaf: b.leaf, Want: b.ID, Real: true}, {Leaf: b.leaf ^ 1}})
	if err != nil || !res[0].Found || !bytes.Equal(res[0].Block.Value, b.Value) {
		t.Fatalf("ReadPaths after 3 failed slot Reads: %v, found %v", err, err == nil && res[0].Found)
	}
	fb.fails = 2
	if _, err := f.tr.Evict(f.ctx, 4, nil); err != nil {
		t.Fatalf("Evict after 2 failed slot Reads: %v", err)
	}
	reads := fb.slotReads()
	if len(reads) != 7 {
		t.Fatalf("%d slot Reads; want 4 for the path read and 3 for the eviction", len(reads))
	}
	for i, r := range reads {
		if first := reads[min(i, 4)/4*4]; !slices.Equal(r, first) {
			t.Fatalf("slot Read %d is %v after a failed %v; want it unchanged", i, r, first)
		}
	}
	if got := f.tr.Stats().ReadRetries; got != 5 {
		t.Fatalf("ReadRetries = %d, want 5", got)
	}
}

// An abandoned Tree issues a failed slot Read only once: the operation
// fails and the trusted state is as it was.
func TestAbandonStopsRetries(t *testing.T) {
	f := newFixture(t, 4, defaults, 14)
	blocks := f.load(10)
	fb := &flaky{Backend: f.cfg.Backend, l: f.cfg.Layout, fails: 1 << 30}
	f.tr.b = fb
	f.tr.Abandon()
	before := f.tr.State()
	if _, err := f.tr.ReadPaths(f.ctx, []PathRead{{Leaf: blocks[0].leaf, Want: blocks[0].ID, Real: true}}); !errors.Is(err, errInjected) {
		t.Fatalf("ReadPaths: %v; want the injected failure", err)
	}
	if n := len(fb.slotReads()); n != 1 {
		t.Fatalf("%d slot Reads after Abandon; want 1", n)
	}
	if after := f.tr.State(); !slices.Equal(before.Versions, after.Versions) {
		t.Fatal("a failed read changed the trusted state")
	}
}

func TestInit(t *testing.T) {
	f := newFixture(t, 9, defaults, 12)
	f.cfg.ValueSize = 1000
	tr, err := NewDriver(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.tr = tr
	f.aud.slotSize = tr.codec.SlotSize()
	f.init(nil) // the auditor checks whole buckets per write
	recs := f.log.Records()
	if len(recs) < 2 || len(recs) > 8 {
		t.Fatalf("Init of %d buckets of ~7 KB in %d writes; want batches of about %d bytes",
			tr.g.Buckets(), len(recs), tree.DefaultBatchBytes)
	}
	if err := tr.Init(f.ctx, make([][]Block, 3)); err == nil {
		t.Error("Init with the wrong number of buckets succeeded")
	}
	offPath := make([][]Block, tr.g.Buckets())
	offPath[2] = []Block{{Leaf: 0}} // bucket 2 is the root's right child; leaf 0 is leftmost
	if err := tr.Init(f.ctx, offPath); err == nil {
		t.Error("Init with a block off its leaf's path succeeded")
	}
	over := make([][]Block, tr.g.Buckets())
	over[5] = make([]Block, 2)
	if err := tr.Init(f.ctx, over); err == nil {
		t.Error("Init with Z+1 blocks in a bucket succeeded")
	}
	if s := tr.Stats(); s.BucketsWritten != tr.g.Buckets() {
		t.Errorf("stats %+v after Init", s)
	}
	for b := range tr.g.Buckets() {
		if m := f.peek(b); m.Count != 0 || m.Valid != allSlots(7) || m.Entries[0].Present {
			t.Fatalf("bucket %d after an empty Init: %+v", b, m)
		}
	}
}

func TestStateRestore(t *testing.T) {
	f := newFixture(t, 4, defaults, 13)
	blocks := f.load(12)
	f.read(PathRead{Leaf: 3})
	f.evict(5, nil)
	f.tr.Forget(blocks[0].bucket, blocks[0].ID)
	st := roundTripGob(t, f.tr.State())

	cfg := f.cfg
	cfg.Seed = nil
	reopened, err := NewDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reopened.Restore(st); err != nil {
		t.Fatal(err)
	}
	old := f.tr
	f.tr = reopened
	f.aud.restored()
	if !slices.Equal(reopened.EvictionLeaves(4), old.EvictionLeaves(4)) {
		t.Fatal("the restored tree evicts other leaves")
	}
	if res := f.read(PathRead{Leaf: blocks[0].leaf, Want: blocks[0].ID, Real: true}); res[0].Found {
		t.Fatal("the restored tree forgot a stale entry")
	}
	for _, b := range blocks[1:] {
		if res := f.read(PathRead{Leaf: b.leaf, Want: b.ID, Real: true}); !res[0].Found {
			t.Fatal("block lost across a restart")
		}
	}
	f.evict(4, nil)
	if _, err := old.ReadPaths(f.ctx, []PathRead{{Leaf: 0}}); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("the old tree, behind storage, read: %v; want ErrTampered", err)
	}
	for _, mod := range []func(*TreeState){
		func(s *TreeState) { s.L++ },
		func(s *TreeState) { s.Z++ },
		func(s *TreeState) { s.S-- },
		func(s *TreeState) { s.Versions = s.Versions[1:] },
		func(s *TreeState) { s.Stale = append(s.Stale, StaleEntry{Bucket: 1 << 20}) },
	} {
		bad := roundTripGob(t, st)
		mod(&bad)
		if err := reopened.Restore(bad); err == nil {
			t.Errorf("Restore accepted %+v", bad)
		}
	}
}

// The auditor the other tests rely on catches what it claims to.
func TestAuditorCatches(t *testing.T) {
	l, g, p := testLayout, tree.Geometry{L: 1}, Params{Z: 1, S: 2}
	metaRead := observe.Record{Op: observe.OpRead, Addrs: []string{l.MetaAddr(0), l.MetaAddr(1)}}
	slotRead := func(s int) observe.Record {
		return observe.Record{Op: observe.OpRead, Addrs: []string{l.SlotAddr(0, s), l.SlotAddr(1, s)}, Sizes: []int{9, 9}}
	}
	metaWrite := observe.Record{Op: observe.OpWrite, Addrs: []string{l.MetaAddr(0), l.MetaAddr(1)}}
	a := newAuditor(l, g, p, 9)
	if err := a.readPaths([]observe.Record{metaRead, slotRead(0), metaWrite}, []uint64{0}); err != nil {
		t.Fatal(err)
	}
	if err := a.readPaths([]observe.Record{slotRead(0), metaWrite}, []uint64{0}); err == nil {
		t.Error("a slot read twice passed")
	}
	a = newAuditor(l, g, p, 9)
	a.readPaths([]observe.Record{metaRead, slotRead(0), metaWrite}, []uint64{0})
	if err := a.readPaths([]observe.Record{slotRead(1), metaWrite}, []uint64{0}); err == nil {
		t.Error("a missing reshuffle passed")
	}
	a = newAuditor(l, g, p, 9)
	a.readPaths([]observe.Record{metaRead, slotRead(0), metaWrite}, []uint64{0})
	if err := a.readPaths([]observe.Record{metaRead, slotRead(1), metaWrite}, []uint64{0}); err == nil {
		t.Error("a metadata read of buckets the Tree has a copy of passed")
	}
	a = newAuditor(l, g, p, 9)
	a.restored()
	if err := a.readPaths([]observe.Record{slotRead(0), metaWrite}, []uint64{0}); err == nil {
		t.Error("a restored Tree's operation without its metadata read passed")
	}
	a = newAuditor(l, g, p, 9)
	if err := a.readPaths([]observe.Record{metaRead, slotRead(0), metaWrite}, []uint64{0, 1}); err == nil {
		t.Error("a metadata read missing a bucket of the union passed")
	}
	a = newAuditor(l, g, p, 9)
	if err := a.evict([]observe.Record{metaRead, slotRead(0), metaWrite}, []uint64{0}); err == nil {
		t.Error("an eviction without its slots passed")
	}
}

// Every multi-path read and eviction hands WriteAhead the Change it makes
// before its Write: applied to the state the tree started from, after
// their Plans (Planned), the Changes give the state the tree reached
// (its plan-seed source included); a WriteAhead error fails the operation
// with nothing written.
func TestChangeReplays(t *testing.T) {
	for _, top := range []int{0, 3} {
		t.Run(fmt.Sprintf("top=%d", top), func(t *testing.T) { changeReplays(t, top) })
	}
}

func changeReplays(t *testing.T, top int) {
	f := newTopFixture(t, 6, defaults, 21, top, noLeak)
	loaded := f.load(40)
	start := roundTripGob(t, f.tr.State())
	var changes []Change
	var plans []Plan
	var ahead error
	f.tr.readAhead = func(_ context.Context, p Plan) error { plans = append(plans, p); return nil }
	f.tr.writeAhead = func(_ context.Context, c Change) error {
		if len(c.Buckets) == 0 {
			t.Error("a Change of no bucket")
		}
		if ahead == nil {
			changes = append(changes, c)
		}
		return ahead
	}
	g := f.tr.g
	for i := range 40 {
		var stash []Block
		for range 3 {
			stash = append(stash, Block{Block: randomBlock(f.r, 32), Leaf: f.r.Uint64N(g.Leaves())})
		}
		b := loaded[i]
		reqs := []PathRead{{Leaf: b.leaf, Want: b.ID, Real: true}, {Leaf: f.r.Uint64N(g.Leaves())}}
		switch i % 5 {
		case 4:
			f.evict(3, stash)
		case 3: // a read and an eviction in one operation
			f.readEvict(2, stash, reqs...)
		default:
			f.read(reqs...)
		}
	}
	taken, placed, tops := 0, 0, 0
	for _, c := range changes {
		taken, placed, tops = taken+len(c.Taken), placed+len(c.Placed), tops+len(c.Top)
	}
	if taken == 0 || placed == 0 || (top > 0) != (tops > 0) {
		t.Fatalf("the changes took %d blocks, placed %d and changed %d top buckets: the test exercised too little", taken, placed, tops)
	}
	replayed, err := NewDriver(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := replayed.Restore(start); err != nil {
		t.Fatal(err)
	}
	for i, c := range changes {
		replayed.Planned(plans[i])
		if err := replayed.Apply(c); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := replayed.State(), f.tr.State(); !reflect.DeepEqual(got, want) {
		t.Fatalf("replaying %d changes gives evictions %d, versions differing from the tree's (evictions %d)", len(changes), got.Evictions, want.Evictions)
	}
	ahead = errors.New("journal full")
	before := f.log.Records()
	if _, err := f.tr.ReadPaths(f.ctx, []PathRead{{Leaf: 0}}); !errors.Is(err, ahead) {
		t.Fatalf("ReadPaths with a failing WriteAhead: %v", err)
	}
	for _, r := range f.log.Records()[len(before):] {
		if r.Op == observe.OpWrite {
			t.Fatal("a read whose WriteAhead failed wrote to storage")
		}
	}
}

// failingWrites fails the next n Writes, writing nothing.
type failingWrites struct {
	backend.Backend
	n int
}

func (b *failingWrites) Write(ctx context.Context, items []backend.Item) error {
	if b.n > 0 {
		b.n--
		return errors.New("storage unavailable")
	}
	return b.Backend.Write(ctx, items)
}

// WriteFenced fails as Write does.
func (b *failingWrites) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if b.n > 0 {
		b.n--
		return errors.New("storage unavailable")
	}
	return b.Backend.WriteFenced(ctx, f, items)
}

// With a WriteAhead hook, an operation returns once its Change is handed
// over (a crash would redo its Write from the journal), and its Write goes
// to storage with the tree's next Read, first: while storage fails the
// Write, that Read is not issued and the Write is tried again with it;
// once storage is back, the read succeeds and finds every bucket at the
// version the tree expects.
func TestDeferredWriteGoesFirst(t *testing.T) {
	f := newFixture(t, 5, defaults, 23)
	loaded := f.load(20)
	f.tr.writeAhead = func(context.Context, Change) error { return nil }
	flaky := &failingWrites{Backend: f.tr.b, n: 2}
	f.tr.b = flaky
	first, second := loaded[0], loaded[1]
	before := len(f.log.Records())
	res, err := f.tr.ReadPaths(f.ctx, []PathRead{{Leaf: first.leaf, Want: first.ID, Real: true}})
	if err != nil || !res[0].Found || res[0].Block.ID != first.ID {
		t.Fatalf("a read with a write-ahead hook: %+v, %v; want its block", res, err)
	}
	for _, r := range f.log.Records()[before:] {
		if r.Op == observe.OpWrite {
			t.Fatal("the Write was issued before the next Read")
		}
	}
	before = len(f.log.Records())
	res, err = f.tr.ReadPaths(f.ctx, []PathRead{{Leaf: second.leaf, Want: second.ID, Real: true}})
	if err != nil || !res[0].Found || res[0].Block.ID != second.ID {
		t.Fatalf("a read after two failed Writes: %+v, %v; want its block", res, err)
	}
	if recs := f.log.Records()[before:]; len(recs) < 2 || recs[0].Op != observe.OpWrite || recs[1].Op != observe.OpRead {
		t.Fatalf("storage saw %v first; want the previous operation's Write, then the Read", recs[0].Op)
	}
	if flaky.n != 0 {
		t.Fatalf("%d failures left unused", flaky.n)
	}
	if got := f.tr.Stats().ReadRetries; got != 2 {
		t.Fatalf("ReadRetries = %d, want 2 (the Read issued again with the Write)", got)
	}
}

// An operation cut short after its reads (its Write never journaled: a
// crash) and resumed with its recorded Plan reads exactly the slots it read
// before, a multi-path read and an eviction alike (Treebeard Sec. 5.3.3);
// started afresh it would choose other dummies. The resumed plan must be
// the next operation's.
func TestResumeReadsSameSlots(t *testing.T) {
	f := newFixture(t, 5, defaults, 15)
	blocks := f.load(20)
	var plans []Plan
	f.tr.readAhead = func(_ context.Context, p Plan) error { plans = append(plans, p); return nil }
	crash := errors.New("crash")
	f.tr.writeAhead = func(context.Context, Change) error { return crash }
	reqs := []PathRead{{Leaf: blocks[0].leaf, Want: blocks[0].ID, Real: true}, {Leaf: 3}, {Leaf: 17}, {Leaf: 30}}
	attempt := func(op func() error) []observe.Record {
		t.Helper()
		from := len(f.log.Records())
		if err := op(); !errors.Is(err, crash) {
			t.Fatalf("operation: %v; want it cut short", err)
		}
		return f.log.Records()[from:]
	}
	read := func() error { _, err := f.tr.ReadPaths(f.ctx, reqs); return err }
	evict := func() error { _, err := f.tr.Evict(f.ctx, 4, nil); return err }
	both := func() error { _, _, err := f.tr.ReadEvict(f.ctx, reqs, 4, nil); return err }
	for _, op := range []struct {
		name string
		run  func() error
	}{{"multi-path read", read}, {"eviction", evict}, {"read and eviction", both}} {
		plans = nil
		first, fresh := attempt(op.run), attempt(op.run)
		if sameReads(first, fresh) {
			t.Fatalf("%s: started afresh it read the same slots", op.name)
		}
		f.tr.Resume(plans[0])
		if resumed := attempt(op.run); !sameReads(first, resumed) {
			t.Fatalf("%s resumed read\n%v\nwhere it read\n%v", op.name, readAddrs(resumed), readAddrs(first))
		}
	}
	f.tr.Resume(plans[0]) // the plan of a read and an eviction
	if _, err := f.tr.ReadPaths(f.ctx, reqs); !errors.Is(err, errNotResumed) {
		t.Fatalf("a multi-path read after an eviction's Resume: %v; want errNotResumed", err)
	}
}

// readAddrs returns the addresses of each Read among recs.
func readAddrs(recs []observe.Record) [][]string {
	var out [][]string
	for _, r := range recs {
		if r.Op == observe.OpRead {
			out = append(out, r.Addrs)
		}
	}
	return out
}

func sameReads(a, b []observe.Record) bool {
	return slices.EqualFunc(readAddrs(a), readAddrs(b), slices.Equal)
}

// With the top levels in memory, storage never sees an address of a top
// bucket, not even at Init; a block a top bucket holds is read from it;
// the top's blocks survive a restart; and a state with another number of
// levels in memory is refused.
func TestCachedLevels(t *testing.T) {
	const top = 2
	f := newTopFixture(t, 5, defaults, 31, top, noLeak)
	blocks := f.load(50)
	var inTop *placedBlock
	for i := range blocks {
		if f.tr.top.holds(blocks[i].bucket) {
			inTop = &blocks[i]
		}
	}
	if inTop == nil || f.tr.Stats().CachedBlocks == 0 {
		t.Fatal("the load put no block in the top levels: the test exercises nothing")
	}
	f.restart()
	res := f.read(PathRead{Leaf: inTop.leaf, Want: inTop.ID, Real: true}, PathRead{Leaf: inTop.leaf ^ 1})
	if !res[0].Found || !bytes.Equal(res[0].Block.Value, inTop.Value) || f.tr.Stats().CachedHits != 1 {
		t.Fatalf("a block of top bucket %d: found %v, %d top hits", inTop.bucket, res[0].Found, f.tr.Stats().CachedHits)
	}
	if again := f.read(PathRead{Leaf: inTop.leaf, Want: inTop.ID, Real: true}); again[0].Found {
		t.Fatal("a block read out of a top bucket was found there again")
	}
	f.evict(8, []Block{{Block: inTop.Block, Leaf: inTop.leaf}})
	for _, r := range f.log.Records() {
		for _, a := range r.Addrs {
			b, _, ok := f.cfg.Layout.ParseSlot(a)
			if !ok {
				b, ok = f.cfg.Layout.ParseMeta(a)
			}
			if ok && f.tr.top.holds(b) {
				t.Fatalf("call %d (%v) holds %q, an address of top bucket %d", r.Seq, r.Op, a, b)
			}
		}
	}
	s := f.tr.State()
	s.CachedLevels = top + 1
	if err := f.tr.Restore(s); err == nil || !strings.Contains(err.Error(), "levels in memory") {
		t.Fatalf("restoring the state of a tree with another number of levels in memory: %v", err)
	}
}
