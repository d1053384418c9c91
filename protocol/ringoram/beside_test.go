package ringoram

import (
	"bytes"
	"encoding/gob"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// operationInputs is one operation a test runs: its reads, the paths it
// evicts and the blocks offered to the eviction.
type operationInputs struct {
	reqs   []PathRead
	k      int
	offers []Block
}

// TestBesideIsOneAfterAnother: two trees of the same seed get the same
// operations, in pairs. One runs each pair one after the other; the other
// starts the second of a pair beside the first whenever Beside allows,
// its slot Read (and metadata Read) issued before the first's slots are
// learnt or its Write issued. Every operation writes the same buckets,
// changes the same state and returns the same results in both, and the
// trees' images are the same, byte for byte, after every pair. The top
// levels are in memory, so reads beside an eviction meet it there.
func TestBesideIsOneAfterAnother(t *testing.T) {
	const levels, top, n = 6, 3, 100 // a full tree: evictions move blocks within the top
	one := newTopFixture(t, levels, defaults, 21, top, noLeak)
	two := newTopFixture(t, levels, defaults, 21, top, noLeak)
	blocks := one.load(n)
	two.load(n)
	two.restart() // metadata Reads beside the first operation, too
	one.restart()
	m := model{leaf: map[tree.BlockID]uint64{}, value: map[tree.BlockID][]byte{}, bucket: map[tree.BlockID]uint64{}, stash: map[tree.BlockID]bool{}}
	var ids []tree.BlockID
	for _, b := range blocks {
		ids = append(ids, b.ID)
		m.leaf[b.ID], m.value[b.ID], m.bucket[b.ID] = b.leaf, b.Value, b.bucket
	}
	r := rand.New(rand.NewPCG(3, 4))
	beside, evicting, pairs := 0, 0, 300
	if testing.Short() {
		pairs = 100
	}
	for range pairs {
		a, b := besidePair(one, &m, ids, r)
		wantA := runWhole(t, one, a)
		wantB := runWhole(t, one, b)
		gotA, gotB, overlapped := runBeside(t, two, a, b, r.IntN(2) == 0, r.IntN(3) == 0)
		if overlapped {
			beside++
			if a.k > 0 || b.k > 0 {
				evicting++
			}
		}
		if !sameWrite(t, gotA, wantA) || !sameWrite(t, gotB, wantB) {
			t.Fatalf("a pair (beside: %v): the operations wrote otherwise than one after the other", overlapped)
		}
		if !bytes.Equal(one.tr.Image(), two.tr.Image()) {
			t.Fatalf("after a pair (beside: %v), the trees' images differ", overlapped)
		}
		checkReads(t, one, &m, a.reqs, wantedOf(a.reqs, &m), wantA.Results)
		checkReads(t, one, &m, b.reqs, wantedOf(b.reqs, &m), wantB.Results)
		moveEvicted(t, one, &m, ids, a, wantA)
		moveEvicted(t, one, &m, ids, b, wantB)
	}
	if beside < pairs/10 || evicting < pairs/20 {
		t.Fatalf("%d pairs of %d ran beside each other, %d of them with an eviction: too few to tell", beside, pairs, evicting)
	}
	t.Logf("%d pairs of %d ran beside each other, %d of them with an eviction; %d blocks found, %d placed", beside, pairs, evicting, m.found, m.placed)
}

// sameWrite reports whether two Writes are the same, an empty value and
// none alike (a tree restored from an image holds no empty slices).
func sameWrite(t *testing.T, a, b Write) bool {
	t.Helper()
	var x, y bytes.Buffer
	if err := errors.Join(gob.NewEncoder(&x).Encode(a), gob.NewEncoder(&y).Encode(b)); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// besidePair draws two operations on distinct blocks: each a multi-path
// read of one to three paths, and one of them, half the time, with an
// eviction of one or two paths offered the whole stash; now and then
// both evict, and Beside must keep them apart.
func besidePair(f *fixture, m *model, ids []tree.BlockID, r *rand.Rand) (a, b operationInputs) {
	taken := map[tree.BlockID]bool{}
	reads := func() []PathRead {
		var reqs []PathRead
		for range 1 + r.IntN(3) {
			id := ids[r.IntN(len(ids))]
			if m.stash[id] || taken[id] {
				reqs = append(reqs, PathRead{Leaf: r.Uint64N(f.tr.g.Leaves())})
				continue
			}
			taken[id] = true
			reqs = append(reqs, PathRead{Leaf: m.leaf[id], Want: id, Real: true})
		}
		return reqs
	}
	a, b = operationInputs{reqs: reads()}, operationInputs{reqs: reads()}
	switch r.IntN(8) {
	case 0, 1:
		a.k, a.offers = 1+r.IntN(2), stashed(m, ids)
	case 2, 3:
		b.k, b.offers = 1+r.IntN(2), stashed(m, ids)
	case 4:
		a.k, a.offers, b.k = 1, stashed(m, ids), 1
	}
	return a, b
}

// wantedOf returns the block each request of reqs must find, as
// checkReads takes them.
func wantedOf(reqs []PathRead, m *model) []tree.BlockID {
	out := make([]tree.BlockID, len(reqs))
	for i, r := range reqs {
		if r.Real && m.leaf[r.Want] == r.Leaf {
			out[i] = r.Want
		}
	}
	return out
}

// moveEvicted updates the model with what op's eviction placed.
func moveEvicted(t *testing.T, f *fixture, m *model, ids []tree.BlockID, op operationInputs, w Write) {
	if op.k == 0 {
		return
	}
	leaves := make([]uint64, 0, op.k)
	for i := range op.k {
		leaves = append(leaves, f.tr.g.ReverseLexLeaf(f.tr.evictions-uint64(op.k)+uint64(i)))
	}
	evicted(t, f, m, ids, f.tr.g.Union(leaves, nil), op.offers, w.Where)
}

// runWhole runs op on f from its start to its commit, its Write issued
// at once.
func runWhole(t *testing.T, f *fixture, op operationInputs) Write {
	t.Helper()
	if _, err := f.tr.Start(op.reqs, op.k, op.offers); err != nil {
		t.Fatal(err)
	}
	reals := readPlanned(t, f)
	return learnAndWrite(t, f, reals)
}

// readPlanned issues the newest operation's metadata Read, if it needs
// one, and its slot Read, and returns the real blocks.
func readPlanned(t *testing.T, f *fixture) [][]tree.Block {
	t.Helper()
	reals, err := f.tr.ReadSlots(f.ctx, plannedSlots(t, f))
	if err != nil {
		t.Fatal(err)
	}
	return reals
}

// learnAndWrite gives the oldest operation its slots, issues its Write
// and commits it.
func learnAndWrite(t *testing.T, f *fixture, reals [][]tree.Block) Write {
	t.Helper()
	w, err := f.tr.LearnSlots(reals)
	if err != nil {
		t.Fatal(err)
	}
	return writeOldest(t, f, w)
}

// writeOldest issues the oldest operation's Write w and commits it.
func writeOldest(t *testing.T, f *fixture, w Write) Write {
	t.Helper()
	items, err := f.tr.Seal(w.Buckets)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tr.b.Write(f.ctx, items); err != nil {
		t.Fatal(err)
	}
	if err := f.tr.Commit(); err != nil {
		t.Fatal(err)
	}
	return w
}

// runBeside runs a, then b beside it when Beside allows: b starts once
// a's slots are read (late: once a's Write is made, before it is
// issued), and its Reads go to storage before a's Write. With reimage,
// the tree is replaced by one restored from its image once both are in
// progress.
func runBeside(t *testing.T, f *fixture, a, b operationInputs, late, reimage bool) (wa, wb Write, beside bool) {
	t.Helper()
	if _, err := f.tr.Start(a.reqs, a.k, a.offers); err != nil {
		t.Fatal(err)
	}
	realsA := readPlanned(t, f)
	if late {
		var err error
		if wa, err = f.tr.LearnSlots(realsA); err != nil {
			t.Fatal(err)
		}
	}
	if !f.tr.Beside(b.reqs, b.k, nil) {
		before := f.tr.Image()
		if _, err := f.tr.Start(b.reqs, b.k, b.offers); !errors.Is(err, ErrBusy) {
			t.Fatalf("Start beside an operation Beside refuses: %v, want ErrBusy", err)
		}
		if !bytes.Equal(f.tr.Image(), before) {
			t.Fatal("Start refused with ErrBusy changed the tree")
		}
		if late {
			wa = writeOldest(t, f, wa)
		} else {
			wa = learnAndWrite(t, f, realsA)
		}
		return wa, runWhole(t, f, b), false
	}
	if _, err := f.tr.Start(b.reqs, b.k, b.offers); err != nil {
		t.Fatal(err)
	}
	realsB := readPlanned(t, f)
	if reimage {
		f.reimage()
	}
	if late {
		if _, err := f.tr.LearnSlots(realsB); err == nil {
			t.Fatal("the second operation took its slots before the first ended")
		}
		wa = writeOldest(t, f, wa)
	} else {
		wa = learnAndWrite(t, f, realsA)
	}
	return wa, learnAndWrite(t, f, realsB), true
}

// reimage replaces the fixture's tree by one restored from its image,
// operations in progress included, and checks the image round trip.
func (f *fixture) reimage() {
	f.t.Helper()
	im := f.tr.Image()
	tr, err := NewDriver(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := tr.RestoreImage(im); err != nil {
		f.t.Fatal(err)
	}
	if !bytes.Equal(tr.Image(), im) {
		f.t.Fatal("a tree restored from an image with operations in progress images otherwise")
	}
	tr.leak = f.tr.leak
	f.tr = tr
}

// TestResumeSeveralInOrder: two operations run beside each other issue
// their slot Reads, and the tree crashes before either writes. A tree
// restarted from the state before them, given both plans in order,
// reads exactly the slots each read before, one after the other; given
// them out of order, it refuses the first operation.
func TestResumeSeveralInOrder(t *testing.T) {
	f := newTopFixture(t, 6, defaults, 5, 3, noLeak)
	f.load(100)
	f.restart()
	before := roundTripGob(t, f.tr.State())
	r := rand.New(rand.NewPCG(5, 6))
	fakes := func() []PathRead {
		return []PathRead{{Leaf: r.Uint64N(f.tr.g.Leaves())}, {Leaf: r.Uint64N(f.tr.g.Leaves())}}
	}
	a, b := fakes(), fakes()
	pa, err := f.tr.Start(a, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	readsA := plannedSlots(t, f)
	for !f.tr.Beside(b, 0, nil) {
		b = fakes()
	}
	pb, err := f.tr.Start(b, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	readsB := plannedSlots(t, f)

	restarted := func(plans ...Plan) *fixture {
		g := *f
		g.restart()
		if err := g.tr.Restore(before); err != nil {
			t.Fatal(err)
		}
		for _, p := range plans {
			g.tr.Resume(p)
		}
		return &g
	}
	g := restarted(pa, pb)
	for i, op := range [][]PathRead{a, b} {
		if _, err := g.tr.Start(op, 0, nil); err != nil {
			t.Fatal(err)
		}
		if got, want := plannedSlots(t, g), [][][]SlotRead{readsA, readsB}[i]; !reflect.DeepEqual(got, want) {
			t.Fatalf("resumed operation %d read other slots than before the crash", i)
		}
		reals, err := g.tr.ReadSlots(g.ctx, g.tr.SlotReads())
		if err != nil {
			t.Fatal(err)
		}
		learnAndWrite(t, g, reals)
	}
	h := restarted(pb, pa)
	if _, err := h.tr.Start(a, 0, nil); !errors.Is(err, errNotResumed) {
		t.Fatalf("the first operation with the second's plan resumed first: %v, want errNotResumed", err)
	}
}

// plannedSlots learns the newest operation's metadata, if it needs any,
// and returns its slot Reads.
func plannedSlots(t *testing.T, f *fixture) [][]SlotRead {
	t.Helper()
	if cold := f.tr.MetaReads(); len(cold) > 0 {
		plains, err := f.tr.ReadMetas(f.ctx, cold)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.tr.LearnMetas(plains); err != nil {
			t.Fatal(err)
		}
	}
	return f.tr.SlotReads()
}
