package ringoram

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
)

// testLayout is the layout of every test tree.
var testLayout = Layout{Prefix: "r/"}

// fixture is a Tree over a tapped in-memory backend whose every call is
// checked by an auditor.
type fixture struct {
	t    testing.TB
	ctx  context.Context
	mem  *mem.Backend
	log  *observe.MemoryLog
	cfg  Config
	tr   *Driver
	r    *rand.Rand
	aud  *auditor
	seen int // records already audited
	// truth, when set, collects the trusted metadata's account of each
	// operation's slots (note).
	truth *slotTruth
}

func newFixture(t testing.TB, L int, p Params, seed uint64) *fixture {
	return newLeakyFixture(t, L, p, seed, noLeak)
}

// newLeakyFixture is newFixture with leak injected into the Tree.
func newLeakyFixture(t testing.TB, L int, p Params, seed uint64, lk leak) *fixture {
	return newTopFixture(t, L, p, seed, 0, lk)
}

// newTopFixture is newLeakyFixture with the top levels of the tree held
// in memory.
func newTopFixture(t testing.TB, L int, p Params, seed uint64, top int, lk leak) *fixture {
	t.Helper()
	m, log := mem.New(), &observe.MemoryLog{}
	cfg := Config{
		Backend: observe.NewTap(m, log), Keys: kvtest.NewKeys(t), Geometry: tree.Geometry{L: L},
		Params: p, Layout: testLayout, ValueSize: 32, Seed: &random.Seed{byte(seed), byte(seed >> 8), 1}, CachedLevels: top,
	}
	tr, err := NewDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.leak = lk
	f := &fixture{t: t, ctx: context.Background(), mem: m, log: log, cfg: cfg, tr: tr,
		r: rand.New(rand.NewPCG(seed, 2))}
	f.aud = newAuditor(cfg.Layout, cfg.Geometry, p, tr.codec.SlotSize())
	f.aud.top = tr.top.levels
	return f
}

// fresh returns the records since the last call.
func (f *fixture) fresh() []observe.Record {
	recs := f.log.Records()[f.seen:]
	f.seen += len(recs)
	return recs
}

// init writes the tree with placed and audits the writes.
func (f *fixture) init(placed [][]Block) {
	f.t.Helper()
	if err := f.tr.Init(f.ctx, placed); err != nil {
		f.t.Fatal(err)
	}
	if err := f.aud.init(f.fresh()); err != nil {
		f.t.Fatal(err)
	}
}

// read runs ReadPaths and audits its calls.
func (f *fixture) read(reqs ...PathRead) []ReadResult {
	f.t.Helper()
	leaves := leavesOf(reqs)
	before := f.metasBefore(leaves)
	res, err := f.tr.ReadPaths(f.ctx, reqs)
	if err == nil {
		err = f.tr.Flush(f.ctx) // the Write, held for the next Read with a write-ahead hook
	}
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.aud.readPaths(f.fresh(), leaves); err != nil {
		f.t.Fatal(err)
	}
	f.note(before)
	return res
}

// leavesOf returns the leaf of each request.
func leavesOf(reqs []PathRead) []uint64 {
	leaves := make([]uint64, len(reqs))
	for i, r := range reqs {
		leaves[i] = r.Leaf
	}
	return leaves
}

// readEvict runs ReadEvict of reqs and an eviction of k paths, and
// audits its calls.
func (f *fixture) readEvict(k int, blocks []Block, reqs ...PathRead) ([]ReadResult, []int64) {
	f.t.Helper()
	evicted, leaves := f.tr.EvictionLeaves(k), leavesOf(reqs)
	before := f.metasBefore(leaves)
	res, where, err := f.tr.ReadEvict(f.ctx, reqs, k, blocks)
	if err == nil {
		err = f.tr.Flush(f.ctx)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.aud.access(f.fresh(), leaves, evicted); err != nil {
		f.t.Fatal(err)
	}
	f.note(before)
	return res, where
}

// evict runs Evict and audits its calls.
func (f *fixture) evict(k int, blocks []Block) []int64 {
	f.t.Helper()
	leaves := f.tr.EvictionLeaves(k)
	where, err := f.tr.Evict(f.ctx, k, blocks)
	if err == nil {
		err = f.tr.Flush(f.ctx)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.aud.evict(f.fresh(), leaves); err != nil {
		f.t.Fatal(err)
	}
	f.note(nil)
	return where
}

// slotTruth is the trusted metadata's account of a run's slots, for the
// audits of where real blocks land and which dummies reads take
// (TestSlotOffsets): every real block a rewrite placed, and every dummy a
// path read took.
type slotTruth struct {
	placed []Placed
	chose  []Chose
}

// metasBefore returns, when f collects a slotTruth, the metadata of the
// buckets a read of leaves will read, as the Tree holds it (or storage,
// for a bucket whose metadata it has no copy of).
func (f *fixture) metasBefore(leaves []uint64) map[uint64]meta {
	if f.truth == nil {
		return nil
	}
	out := map[uint64]meta{}
	for _, b := range f.aud.union(leaves) {
		out[b] = f.metaOf(b)
	}
	return out
}

// metaOf returns bucket's metadata as the Tree holds it, or as storage
// does when the Tree has no copy.
func (f *fixture) metaOf(bucket uint64) meta {
	m := f.tr.newMetas(1)[0]
	if f.tr.cache.get(&m, bucket, f.cfg.Params, f.cfg.Geometry) {
		return m
	}
	return f.peek(bucket)
}

// note adds to f.truth, if set, what the operation just audited did by
// the trusted metadata: each slot its path read took that before (the
// metadata before it) listed as a valid dummy, as a Chose among those
// dummies, and each real block a bucket it rewrote now lists, as a
// Placed in the order the rewrite took the blocks (its entries').
func (f *fixture) note(before map[uint64]meta) {
	if f.truth == nil {
		return
	}
	for _, addr := range f.aud.pathSlots {
		b, s, _ := f.cfg.Layout.ParseSlot(addr)
		m := before[b]
		dummies := m.Valid &^ m.realMask()
		if dummies&(1<<s) == 0 { // the slot of a block a request wants
			continue
		}
		f.truth.chose = append(f.truth.chose, Chose{Rank: bits.OnesCount64(dummies & (1<<s - 1)), Unread: bits.OnesCount64(dummies)})
	}
	for _, b := range f.aud.rewritten {
		m := f.metaOf(b)
		n := 0
		for n < len(m.Entries) && m.Entries[n].Present {
			n++
		}
		for g, e := range m.Entries[:n] {
			f.truth.placed = append(f.truth.placed, Placed{Slot: int(e.Slot), Slots: f.cfg.Params.slots(), Gathered: g, Of: n})
		}
		if slices.ContainsFunc(m.Entries[n:], func(e entry) bool { return e.Present }) {
			f.t.Fatalf("bucket %d rewritten with real entries after an empty one", b)
		}
	}
}

// restart replaces the Tree by one restored from its state, as a clean
// restart makes it: with no copy of any bucket's metadata.
func (f *fixture) restart() {
	f.t.Helper()
	tr, err := NewDriver(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := tr.Restore(roundTripGob(f.t, f.tr.State())); err != nil {
		f.t.Fatal(err)
	}
	tr.leak = f.tr.leak
	f.tr = tr
	f.aud.restored()
}

// peek opens bucket's metadata straight from storage, unlogged.
func (f *fixture) peek(bucket uint64) meta {
	f.t.Helper()
	addr := f.cfg.Layout.MetaAddr(bucket)
	vals, err := f.mem.Read(f.ctx, []string{addr})
	if err != nil {
		f.t.Fatal(err)
	}
	plain, err := f.tr.keys.Open(nil, []byte(addr), vals[0])
	if err != nil {
		f.t.Fatal(err)
	}
	m := f.tr.newMetas(1)[0]
	if err := f.tr.checkMeta(&m, bucket, plain); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// holds returns the live IDs listed in bucket's metadata, or held by a
// top bucket.
func (f *fixture) holds(bucket uint64) []tree.BlockID {
	var ids []tree.BlockID
	if f.tr.top.holds(bucket) {
		for _, b := range f.tr.top.blocks[bucket] {
			ids = append(ids, b.Block.ID)
		}
		return ids
	}
	for _, e := range f.peek(bucket).Entries {
		if f.tr.live(bucket, e) {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// find returns the bucket on leaf's path listing id as live, failing the
// test when there is none.
func (f *fixture) find(id tree.BlockID, leaf uint64) uint64 {
	f.t.Helper()
	for _, b := range f.tr.g.Path(leaf, nil) {
		if slices.Contains(f.holds(b), id) {
			return b
		}
	}
	f.t.Fatalf("block not on the path to leaf %d", leaf)
	return 0
}

// raw reads and writes storage behind the Tree's back.
func (f *fixture) rawGet(addr string) []byte {
	f.t.Helper()
	vals, err := f.mem.Read(f.ctx, []string{addr})
	if err != nil || vals[0] == nil {
		f.t.Fatalf("raw read of %q: %v, %v", addr, vals, err)
	}
	return vals[0]
}

func (f *fixture) rawPut(addr string, v []byte) {
	f.t.Helper()
	if err := f.mem.Write(f.ctx, []backend.Item{{Addr: addr, Value: v}}); err != nil {
		f.t.Fatal(err)
	}
}

func randomBlock(r *rand.Rand, valueSize int) tree.Block {
	var b tree.Block
	for i := range b.ID {
		b.ID[i] = byte(r.UintN(256))
	}
	b.Value = make([]byte, r.IntN(valueSize+1))
	for i := range b.Value {
		b.Value[i] = byte(r.UintN(256))
	}
	return b
}

// placedBlock is a block laid out by load.
type placedBlock struct {
	tree.Block
	leaf, bucket uint64
}

// load writes the tree (Init) with n random blocks on random leaves, each
// in the deepest bucket of its path with room, as a bulk load does, and
// returns them; blocks that find no room are left out.
func (f *fixture) load(n int) []placedBlock {
	f.t.Helper()
	g := f.tr.g
	buckets := make([][]Block, g.Buckets())
	var out []placedBlock
	for range n {
		b, leaf := randomBlock(f.r, f.cfg.ValueSize), f.r.Uint64N(g.Leaves())
		if tree.PlaceDeepest(g, buckets, f.cfg.Params.Z, leaf, Block{Block: b, Leaf: leaf}) {
			out = append(out, placedBlock{Block: b, leaf: leaf})
		}
	}
	at := map[tree.BlockID]uint64{}
	for b, blocks := range buckets {
		for _, blk := range blocks {
			at[blk.Block.ID] = uint64(b)
		}
	}
	for i := range out {
		out[i].bucket = at[out[i].ID]
	}
	f.init(buckets)
	return out
}

// auditor checks backend calls as the storage operator sees them: the
// shape of each operation, and Ring ORAM's single access invariant (no
// slot of a bucket read twice between two full rewrites of the bucket),
// and that a bucket is reshuffled exactly when fewer than Z of its dummies
// are left unread (after S reads with Z = 1).
type auditor struct {
	l        Layout
	g        tree.Geometry
	p        Params
	top      int // levels held in memory, never on storage
	slotSize int
	read     map[uint64]uint64 // per bucket: slots read since the last full rewrite
	count    map[uint64]int    // per bucket: slots read by path reads since the last full rewrite
	offsets  []int             // per slot index: how often a path read read it
	known    map[uint64]bool   // buckets whose metadata the Tree has a copy of (metaCache)
	// Of the last operation checked: the slots its path read took (not
	// its reshuffles'), and the buckets its Write rewrote whole.
	pathSlots []string
	rewritten []uint64
}

func newAuditor(l Layout, g tree.Geometry, p Params, slotSize int) *auditor {
	return &auditor{l: l, g: g, p: p, slotSize: slotSize, read: map[uint64]uint64{}, count: map[uint64]int{},
		offsets: make([]int, p.slots()), known: map[uint64]bool{}}
}

// init checks an Init: writes only, every bucket written whole exactly
// once and never split across two writes.
func (a *auditor) init(recs []observe.Record) error {
	done := map[uint64]bool{}
	for n, r := range recs {
		if r.Op != observe.OpWrite {
			return fmt.Errorf("init call %d is a %v; want writes only", n, r.Op)
		}
		full, err := a.written(r)
		if err != nil {
			return err
		}
		for _, b := range full {
			if done[b] {
				return fmt.Errorf("bucket %d written twice by Init", b)
			}
			done[b] = true
		}
	}
	if want := a.g.Buckets() - (1<<a.top - 1); uint64(len(done)) != want {
		return fmt.Errorf("Init wrote %d buckets; want the %d below the top", len(done), want)
	}
	clear(a.read)
	clear(a.count)
	a.warm() // Init wrote every bucket's metadata
	return nil
}

// readPaths checks a ReadPaths of leaves (access).
func (a *auditor) readPaths(recs []observe.Record, leaves []uint64) error {
	return a.access(recs, leaves, nil)
}

// access checks a ReadEvict of leaves evicting the paths to evicted: its
// metadata Read, if any; for a read, ONE Read of min(c, Z) slots of each
// bucket of its union followed by Z slots of each bucket due for an early
// reshuffle and not evicted; for an eviction, ONE Read of Z slots of each
// bucket of its union; and the Write.
func (a *auditor) access(recs []observe.Record, leaves, evicted []uint64) error {
	a.pathSlots, a.rewritten = nil, nil
	read, evict := a.union(leaves), a.union(evicted)
	union := slices.Compact(slices.Sorted(slices.Values(slices.Concat(read, evict))))
	recs, err := a.metaRead(recs, union)
	if err != nil {
		return err
	}
	want := 1
	if len(leaves) > 0 {
		want++
	}
	if len(evicted) > 0 {
		want++
	}
	if len(recs) != want {
		return fmt.Errorf("the operation made %d calls after its metadata Read; want %d slot Reads and a Write", len(recs), want-1)
	}
	var due []uint64
	if len(leaves) > 0 {
		if due, err = a.pathRead(recs[0], leaves, read, evict); err != nil {
			return err
		}
		recs = recs[1:]
	}
	if len(evicted) > 0 {
		if err := a.slotRead(recs[0], evict, a.each(len(evict))); err != nil {
			return fmt.Errorf("eviction: %w", err)
		}
		recs = recs[1:]
	}
	return a.rewrite(recs[0], union, slices.Compact(slices.Sorted(slices.Values(slices.Concat(due, evict)))))
}

// pathRead checks a multi-path read's slot Read of the paths to leaves
// (union read): min(c, Z) slots of each bucket, then Z slots of each bucket
// due for an early reshuffle and not in evict. It returns those due.
func (a *auditor) pathRead(r observe.Record, leaves, read, evict []uint64) ([]uint64, error) {
	per := make([]int, len(read)) // min(paths crossing the bucket, Z)
	n := 0
	for _, leaf := range leaves {
		for lvl := a.top; lvl <= a.g.L; lvl++ {
			i := index(read, a.g.BucketAt(leaf, lvl))
			if per[i] < a.p.Z {
				per[i]++
				n++
			}
		}
	}
	path, shuffle := splitRecord(r, n)
	if err := a.slotRead(path, read, per); err != nil {
		return nil, err
	}
	for _, addr := range path.Addrs {
		_, s, _ := a.l.ParseSlot(addr)
		a.offsets[s]++
	}
	a.pathSlots = path.Addrs
	var due []uint64
	for i, b := range read {
		a.count[b] += per[i]
		if a.count[b] > a.p.S {
			return nil, fmt.Errorf("bucket %d read %d slots without a reshuffle", b, a.count[b])
		}
		if a.count[b] > a.p.S-a.p.Z && index(evict, b) < 0 {
			due = append(due, b)
		}
	}
	if err := a.slotRead(shuffle, due, a.each(len(due))); err != nil {
		return nil, fmt.Errorf("%d buckets due for a reshuffle: %w", len(due), err)
	}
	return due, nil
}

// splitRecord splits a Read after its first n addresses.
func splitRecord(r observe.Record, n int) (observe.Record, observe.Record) {
	head, tail := r, r
	n = min(n, len(r.Addrs))
	head.Addrs, tail.Addrs = r.Addrs[:n], r.Addrs[n:]
	if len(r.Sizes) == len(r.Addrs) {
		head.Sizes, tail.Sizes = r.Sizes[:n], r.Sizes[n:]
	}
	return head, tail
}

// evict checks an Evict of leaves (access).
func (a *auditor) evict(recs []observe.Record, leaves []uint64) error {
	return a.access(recs, nil, leaves)
}

// union returns the buckets of the paths to leaves below the top.
func (a *auditor) union(leaves []uint64) []uint64 {
	return slices.DeleteFunc(a.g.Union(leaves, nil), func(b uint64) bool { return a.g.Level(b) < a.top })
}

// each returns Z slots for each of n buckets.
func (a *auditor) each(n int) []int {
	per := make([]int, n)
	for i := range per {
		per[i] = a.p.Z
	}
	return per
}

// metaRead checks an operation's metadata Read, at recs[0] when there is
// one: it holds exactly the buckets of union whose metadata the Tree has
// no copy of (none it read or wrote since it was made or restored), none
// when it has them all. It returns the calls after it.
func (a *auditor) metaRead(recs []observe.Record, union []uint64) ([]observe.Record, error) {
	var cold []uint64
	for _, b := range union {
		if !a.known[b] {
			cold = append(cold, b)
		}
		a.known[b] = true
	}
	if len(cold) == 0 {
		return recs, nil
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("no calls; want a metadata read of %d buckets", len(cold))
	}
	r := recs[0]
	if r.Op != observe.OpRead || len(r.Addrs) != len(cold) {
		return nil, fmt.Errorf("metadata call: %v of %d addresses; want a read of %d", r.Op, len(r.Addrs), len(cold))
	}
	for i, addr := range r.Addrs {
		if b, ok := a.l.ParseMeta(addr); !ok || b != cold[i] {
			return nil, fmt.Errorf("metadata read %d is %q; want the metadata of bucket %d", i, addr, cold[i])
		}
	}
	return recs[1:], nil
}

// restored notes that the Tree was restored from a TreeState: it has no
// copy of any bucket's metadata.
func (a *auditor) restored() { clear(a.known) }

// warm notes that the Tree has a copy of every bucket's metadata.
func (a *auditor) warm() {
	for b := uint64(1<<a.top - 1); b < a.g.Buckets(); b++ {
		a.known[b] = true
	}
}

// slotRead checks a read of exactly per[i] slots of buckets[i], in
// order, each slot not read since its bucket's last full rewrite.
func (a *auditor) slotRead(r observe.Record, buckets []uint64, per []int) error {
	var of []int // the index in buckets of each address read
	for i, n := range per {
		for range n {
			of = append(of, i)
		}
	}
	if r.Op != observe.OpRead || len(r.Addrs) != len(of) {
		return fmt.Errorf("slot call: %v of %d addresses; want a read of %d", r.Op, len(r.Addrs), len(of))
	}
	for i, addr := range r.Addrs {
		b, s, ok := a.l.ParseSlot(addr)
		if !ok || b != buckets[of[i]] || s >= a.p.slots() || i >= len(r.Sizes) || r.Sizes[i] != a.slotSize {
			return fmt.Errorf("slot read %d is %q; want a slot of bucket %d of %d bytes", i, addr, buckets[of[i]], a.slotSize)
		}
		if i > 0 && of[i-1] == of[i] {
			if _, prev, _ := a.l.ParseSlot(r.Addrs[i-1]); prev >= s {
				return fmt.Errorf("slots %d and %d of bucket %d read out of order", prev, s, b)
			}
		}
		if a.read[b]&(1<<s) != 0 {
			return fmt.Errorf("slot %d of bucket %d read twice between rewrites", s, b)
		}
		a.read[b] |= 1 << s
	}
	return nil
}

// rewrite checks the final write: the metadata of every bucket of union,
// and all slots of exactly the buckets of full, in one call.
func (a *auditor) rewrite(r observe.Record, union, full []uint64) error {
	if r.Op != observe.OpWrite {
		return fmt.Errorf("last call is a %v; want a write", r.Op)
	}
	got, err := a.written(r)
	if err != nil {
		return err
	}
	if !slices.Equal(got, full) {
		return fmt.Errorf("write rewrote buckets %v in full; want %v", got, full)
	}
	metas := 0
	for _, addr := range r.Addrs {
		if b, ok := a.l.ParseMeta(addr); ok {
			if index(union, b) < 0 {
				return fmt.Errorf("write of the metadata of bucket %d, outside the union", b)
			}
			metas++
		}
	}
	if metas != len(union) {
		return fmt.Errorf("write of %d metadata records; want %d", metas, len(union))
	}
	for _, b := range full {
		delete(a.read, b)
		delete(a.count, b)
	}
	a.rewritten = full
	return nil
}

// written returns the buckets a write rewrites in full (sorted), checking
// that every bucket it touches has its metadata and all or none of its
// slots in it.
func (a *auditor) written(r observe.Record) ([]uint64, error) {
	slots, metas := map[uint64]uint64{}, map[uint64]bool{}
	for _, addr := range r.Addrs {
		if b, s, ok := a.l.ParseSlot(addr); ok {
			slots[b] |= 1 << s
		} else if b, ok := a.l.ParseMeta(addr); ok {
			metas[b] = true
		} else {
			return nil, fmt.Errorf("write of %q, outside the layout", addr)
		}
	}
	var full []uint64
	for b, mask := range slots {
		if mask != allSlots(a.p.slots()) || !metas[b] {
			return nil, fmt.Errorf("write of slots %b of bucket %d (metadata: %v); want all slots with the metadata", mask, b, metas[b])
		}
		full = append(full, b)
	}
	slices.Sort(full)
	return full, nil
}
