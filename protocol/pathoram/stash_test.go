package pathoram

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// simPaths keeps the tree in memory, unsealed: the access logic (position
// map, stash, remapping, flush) runs unchanged, without the cost of
// sealing, so the stash can be measured over many accesses in seconds.
type simPaths struct{ buckets [][]tree.Block }

func (s *simPaths) planRead(plannedRead) uint64 { return 0 }

func (s *simPaths) awaitPlan(uint64) error { return nil }

func (s *simPaths) readPath(_ context.Context, path []uint64) ([][]tree.Block, error) {
	out := make([][]tree.Block, len(path))
	for i, b := range path {
		out[i] = s.buckets[b]
	}
	return out, nil
}

func (s *simPaths) writePath(_ context.Context, path []uint64, contents [][]tree.Block, _ func() []byte, _ []plannedRead, _ bool) (*writeBack, error) {
	for i, b := range path {
		s.buckets[b] = append(s.buckets[b][:0], contents[i]...)
	}
	return nil, nil
}

func simID(i int) tree.BlockID {
	var id tree.BlockID
	binary.BigEndian.PutUint64(id[:], uint64(i)+1)
	return id
}

// simStash fills a store of capacity n to the brim by bulk load, then runs
// accesses alternating reads and overwrites of uniformly random keys,
// checking every value read, and returns the stash's high-water mark.
func simStash(t *testing.T, n, accesses int, seed byte) int {
	t.Helper()
	var s [32]byte
	s[0] = seed
	sim := &simPaths{}
	o := newORAM(tree.NewGeometry(n), DefaultZ, n, 8, sim, s)
	vals := make(map[tree.BlockID][]byte, n)
	model := make([]uint64, n)
	for i := range n {
		vals[simID(i)] = binary.BigEndian.AppendUint64(nil, 0)
	}
	sim.buckets, o.pos, o.stash = o.layout(vals)
	o.stashMax = len(o.stash)
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	ks := make([]int, accesses)
	for i := range ks {
		ks[i] = r.IntN(n)
	}
	ctx := context.Background()
	var buf [8]byte
	for i, k := range ks {
		next := func(n int) []upcomingAccess { // each access's read planned by one before
			var next []upcomingAccess
			for j, k := range ks[i+1 : min(i+1+n, len(ks))] {
				next = append(next, upcomingAccess{block: simID(k), read: (i+1+j)%2 == 0})
			}
			return next
		}
		m := kv.Mutation{Op: kv.MutRead}
		if i%2 == 1 {
			model[k]++
			m = kv.Mutation{Op: kv.MutSet, Arg: binary.BigEndian.AppendUint64(buf[:0], model[k])}
		}
		res, _, err := o.access(ctx, simID(k), strconv.Itoa(k), m, next, false)
		if err != nil || !res.Found {
			t.Fatalf("access %d to key %d: found %v, %v", i, k, res.Found, err)
		}
		if m.Op == kv.MutRead && binary.BigEndian.Uint64(res.Old) != model[k] {
			t.Fatalf("access %d: key %d holds %d; want %d", i, k, binary.BigEndian.Uint64(res.Old), model[k])
		}
	}
	checkInvariant(t, o, sim)
	return o.stashMax
}

// checkInvariant checks the block-path invariant (Sec. IV-A): every block
// is, exactly once, either in the stash or in a bucket on its assigned
// path.
func checkInvariant(t *testing.T, o *oram, sim *simPaths) {
	t.Helper()
	seen := map[tree.BlockID]bool{}
	for _, e := range o.stash {
		seen[e.id] = true
	}
	for b, blocks := range sim.buckets {
		if len(blocks) > o.z {
			t.Fatalf("bucket %d holds %d blocks; Z = %d", b, len(blocks), o.z)
		}
		for _, blk := range blocks {
			leaf, ok := o.pos[blk.ID]
			if !ok || seen[blk.ID] || !o.g.OnPath(uint64(b), leaf) {
				t.Fatalf("block %x in bucket %d: known %v, seen before %v, on its path %v", blk.ID[:8], b, ok, seen[blk.ID], ok && o.g.OnPath(uint64(b), leaf))
			}
			seen[blk.ID] = true
		}
	}
	if len(seen) != len(o.pos) {
		t.Fatalf("%d blocks stored; the position map has %d", len(seen), len(o.pos))
	}
}

// stashBound is the stash size (blocks left after a write-back) the tests
// assert for Z=4 at full capacity; see docs/protocols.md, "Path ORAM".
const stashBound = 32

// TestStashBound: at N = 2^10 keys (a full store), 200k accesses keep the
// stash under stashBound.
func TestStashBound(t *testing.T) {
	const n, accesses = 1 << 10, 200_000
	got := simStash(t, n, accesses, 1)
	t.Logf("N=%d, %d accesses: stash high-water mark %d blocks (bound %d)", n, accesses, got, stashBound)
	if got > stashBound {
		t.Errorf("stash reached %d blocks; bound %d", got, stashBound)
	}
}
