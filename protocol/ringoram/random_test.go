package ringoram

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

func roundTripGob(t testing.TB, s TreeState) TreeState {
	t.Helper()
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(s); err != nil {
		t.Fatal(err)
	}
	var out TreeState
	if err := gob.NewDecoder(&buf).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// model is the caller's view of where each block is: its leaf, its value,
// and either the stash or a bucket of the tree.
type model struct {
	leaf   map[tree.BlockID]uint64
	value  map[tree.BlockID][]byte
	bucket map[tree.BlockID]uint64 // blocks in the tree
	stash  map[tree.BlockID]bool

	found, placed, superseded int // how much the run exercised
}

// A long randomized run against a model of the caller (position map and
// stash): every real block is always either in the stash or found where
// the model says; superseded copies (Forget) are never returned; the
// auditor checks every call (shapes, single access, reshuffles at S).
func TestRandomized(t *testing.T) {
	for _, tc := range []struct {
		p   Params
		top int
		ops int
	}{{defaults, 0, 2000}, {Params{Z: 1, S: 2}, 0, 2000}, {Params{Z: 2, S: 3}, 0, 800}, {defaults, 4, 2000}, {Params{Z: 1, S: 2}, 8, 800}} {
		t.Run(fmt.Sprintf("Z=%d,S=%d,top=%d", tc.p.Z, tc.p.S, tc.top), func(t *testing.T) {
			ops := tc.ops
			if testing.Short() {
				ops /= 5
			}
			randomized(t, tc.p, tc.top, ops, 120, noLeak, nil)
		})
	}
}

// randomized loads n random blocks into a tree of 9 levels, top of them
// held in memory, with lk injected, runs ops random operations on it
// (multi-path reads, evictions, superseded blocks) against the model,
// collecting truth when it is set (fixture.note), and returns the
// fixture.
func randomized(t *testing.T, p Params, top, ops, n int, lk leak, truth *slotTruth) *fixture {
	f := newTopFixture(t, 8, p, 14, top, lk)
	f.truth = truth
	blocks := f.load(n)
	m := model{leaf: map[tree.BlockID]uint64{}, value: map[tree.BlockID][]byte{}, bucket: map[tree.BlockID]uint64{}, stash: map[tree.BlockID]bool{}}
	var ids []tree.BlockID
	for _, b := range blocks {
		ids = append(ids, b.ID)
		m.leaf[b.ID], m.value[b.ID], m.bucket[b.ID] = b.leaf, b.Value, b.bucket
	}
	maxStash := 0
	for op := range ops {
		switch n := f.r.IntN(10); {
		case n < 5:
			randomReads(t, f, &m, ids)
		case n < 7:
			randomReadEvict(t, f, &m, ids)
		case n < 9:
			randomEvict(t, f, &m, ids)
		default:
			supersede(f, &m, ids)
		}
		maxStash = max(maxStash, len(m.stash))
		if op%500 == 499 { // a clean restart now and then
			f.restart()
		}
	}
	// Every block in the tree is where the model says.
	for _, id := range ids {
		if !m.stash[id] {
			if res := f.read(PathRead{Leaf: m.leaf[id], Want: id, Real: true}); !res[0].Found || !bytes.Equal(res[0].Block.Value, m.value[id]) {
				t.Fatalf("final sweep: block in bucket %d not found on leaf %d", m.bucket[id], m.leaf[id])
			}
		}
	}
	if m.found < ops/10 || m.placed < ops/10 || m.superseded < ops/100 {
		t.Fatalf("%d blocks found, %d evicted, %d superseded: the run exercised too little", m.found, m.placed, m.superseded)
	}
	t.Logf("%d found, %d evicted, %d superseded, largest stash %d", m.found, m.placed, m.superseded, maxStash)
	return f
}

// randomReads reads a batch (randomBatch).
func randomReads(t *testing.T, f *fixture, m *model, ids []tree.BlockID) {
	reqs, wanted := randomBatch(f, m, ids)
	if len(reqs) == 0 {
		return
	}
	checkReads(t, f, m, reqs, wanted, f.read(reqs...))
}

// randomReadEvict reads a batch (randomBatch) and evicts a few paths with
// the whole stash as it was before the read, in one operation.
func randomReadEvict(t *testing.T, f *fixture, m *model, ids []tree.BlockID) {
	reqs, wanted := randomBatch(f, m, ids)
	stash := stashed(m, ids)
	k := 1 + f.r.IntN(8)
	union := f.tr.g.Union(f.tr.EvictionLeaves(k), nil)
	res, where := f.readEvict(k, stash, reqs...)
	checkReads(t, f, m, reqs, wanted, res)
	evicted(t, f, m, ids, union, stash, where)
}

// randomBatch draws a batch of path reads: blocks in the tree on their
// leaf, fake reads for blocks in the stash, now and then a duplicate or a
// wrong leaf; wanted[i] is the block request i must find, if any.
func randomBatch(f *fixture, m *model, ids []tree.BlockID) (reqs []PathRead, wanted []tree.BlockID) {
	g := f.tr.g
	for range 1 + f.r.IntN(6) {
		id := ids[f.r.IntN(len(ids))]
		switch {
		case m.stash[id]:
			reqs, wanted = append(reqs, PathRead{Leaf: f.r.Uint64N(g.Leaves())}), append(wanted, tree.BlockID{})
		case f.r.IntN(10) == 0: // a leaf whose path misses the block's bucket
			leaf := f.r.Uint64N(g.Leaves())
			if g.OnPath(m.bucket[id], leaf) {
				continue
			}
			reqs, wanted = append(reqs, PathRead{Leaf: leaf, Want: id, Real: true}), append(wanted, tree.BlockID{})
		default:
			reqs, wanted = append(reqs, PathRead{Leaf: m.leaf[id], Want: id, Real: true}), append(wanted, id)
		}
	}
	return reqs, wanted
}

// checkReads checks the results of a batch against the model, and moves
// the blocks found into the stash with a new value and leaf.
func checkReads(t *testing.T, f *fixture, m *model, reqs []PathRead, wanted []tree.BlockID, res []ReadResult) {
	g := f.tr.g
	served := map[tree.BlockID]bool{} // a block goes to the first request for it
	for i, r := range res {
		id := wanted[i]
		expect := id != (tree.BlockID{}) && !m.stash[id] && !served[id]
		if expect {
			served[id] = true
		}
		if r.Found != expect {
			t.Fatalf("request %d (leaf %d): found %v; model says %v", i, reqs[i].Leaf, r.Found, expect)
		}
		if !r.Found {
			continue
		}
		if r.Block.ID != id || !bytes.Equal(r.Block.Value, m.value[id]) {
			t.Fatalf("request %d: wrong block", i)
		}
		// Into the stash with a new value and leaf (a Put).
		m.found++
		m.stash[id] = true
		delete(m.bucket, id)
		m.leaf[id], m.value[id] = f.r.Uint64N(g.Leaves()), randomBlock(f.r, 32).Value
	}
}

// randomEvict evicts a few paths with the whole stash.
func randomEvict(t *testing.T, f *fixture, m *model, ids []tree.BlockID) {
	stash := stashed(m, ids)
	k := 1 + f.r.IntN(8)
	union := f.tr.g.Union(f.tr.EvictionLeaves(k), nil)
	evicted(t, f, m, ids, union, stash, f.evict(k, stash))
}

// stashed returns the blocks in the model's stash.
func stashed(m *model, ids []tree.BlockID) []Block {
	var stash []Block
	for _, id := range ids {
		if m.stash[id] {
			stash = append(stash, Block{Block: tree.Block{ID: id, Value: m.value[id]}, Leaf: m.leaf[id]})
		}
	}
	return stash
}

// evicted checks an eviction of the paths of union that placed stash
// block j in bucket where[j], and updates the model.
func evicted(t *testing.T, f *fixture, m *model, ids []tree.BlockID, union []uint64, stash []Block, where []int64) {
	for _, id := range ids { // blocks the eviction read may have moved down their paths
		if b, in := m.bucket[id]; in && !m.stash[id] && index(union, b) >= 0 {
			m.bucket[id] = f.find(id, m.leaf[id])
		}
	}
	for j, b := range stash {
		if where[j] < 0 {
			continue
		}
		if !f.tr.g.OnPath(uint64(where[j]), b.Leaf) {
			t.Fatalf("block for leaf %d evicted to bucket %d", b.Leaf, where[j])
		}
		delete(m.stash, b.Block.ID)
		m.bucket[b.Block.ID] = uint64(where[j])
		m.placed++
	}
}

// supersede gives a block in the tree a new value in the stash, without
// reading it, and tells the tree its copy is stale.
func supersede(f *fixture, m *model, ids []tree.BlockID) {
	var inTree []tree.BlockID
	for _, id := range ids {
		if !m.stash[id] {
			inTree = append(inTree, id)
		}
	}
	if len(inTree) == 0 {
		return
	}
	slices.SortFunc(inTree, func(a, b tree.BlockID) int { return bytes.Compare(a[:], b[:]) })
	id := inTree[f.r.IntN(len(inTree))]
	f.tr.Forget(m.bucket[id], id)
	m.superseded++
	delete(m.bucket, id)
	m.stash[id] = true
	m.leaf[id], m.value[id] = f.r.Uint64N(f.tr.g.Leaves()), randomBlock(f.r, 32).Value
}
