package pathoram

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Obliviousness, issue item (c): pathoram's sequence of backend calls has
// the same shape for any workload. Three workloads of equal length run on
// stores with the adversary's view logged:
//
//   - hot: one key, read and overwritten over and over;
//   - uniform: reads and overwrites of keys drawn uniformly from 512;
//   - mix: gets of missing keys, puts of new keys, deletes of existing and
//     of missing keys, in turn.
//
// Every access must be exactly one Read of the L+1 buckets of a valid
// root-to-leaf path followed by one Write of the same addresses, all of one
// bucket's size; the leaves read must pass a chi-square test of
// uniformity: leaves grouped into 64 bins, 63 degrees of freedom, rejected
// when the statistic exceeds 103.44 (p < 0.001); and consecutive accesses
// must rarely read the same path (each block is remapped after every
// access): at most maxRepeats times in shapeOps accesses, where about
// shapeOps/1024 = 2.9 are expected (Poisson: P(more than 15) < 1e-6).
const (
	shapeCapacity = 1024 // L = 10: 1024 leaves, 16 per bin
	shapeOps      = 3000 // about 47 reads expected per bin
	chiBins       = 64
	chiCritical   = 103.44 // chi-square, 63 degrees of freedom, p = 0.001
	maxRepeats    = 15
)

type workload struct {
	name  string
	setup func(f *fixture)
	op    func(f *fixture, r *rand.Rand, i int) error
}

var workloads = []workload{
	{"hot", func(f *fixture) { f.put("hot", "v") }, func(f *fixture, _ *rand.Rand, i int) error {
		if i%2 == 0 {
			_, _, err := f.s.Get(f.t.Context(), "hot")
			return err
		}
		return f.s.Put(f.t.Context(), "hot", []byte(fmt.Sprint(i)))
	}},
	{"uniform", preload512, func(f *fixture, r *rand.Rand, i int) error {
		k := fmt.Sprint("k", r.IntN(512))
		if i%2 == 0 {
			_, _, err := f.s.Get(f.t.Context(), k)
			return err
		}
		return f.s.Put(f.t.Context(), k, []byte(fmt.Sprint(i)))
	}},
	{"mix", preload512, func(f *fixture, r *rand.Rand, i int) error {
		ctx := f.t.Context()
		switch i % 4 {
		case 0:
			_, _, err := f.s.Get(ctx, fmt.Sprint("missing", i))
			return err
		case 1:
			return f.s.Put(ctx, fmt.Sprint("new", i), []byte("v"))
		case 2:
			return f.s.Delete(ctx, fmt.Sprint("new", i-1))
		}
		return f.s.Delete(ctx, fmt.Sprint("missing", i))
	}},
}

func preload512(f *fixture) {
	for i := range 512 {
		f.put(fmt.Sprint("k", i), "v")
	}
}

func TestAccessShape(t *testing.T) {
	var shapes [][]string
	for wi, w := range workloads {
		t.Run(w.name, func(t *testing.T) {
			f := newFixture(t, shapeCapacity, 32, seeded(byte(wi+1)))
			w.setup(f)
			f.log.Reset()
			r := rand.New(rand.NewPCG(uint64(wi), 9))
			for i := range shapeOps {
				if err := w.op(f, r, i); err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
			}
			leaves := checkAccesses(t, f.geometry(), f.bucketSize(), f.log.Records())
			checkUniform(t, f.geometry(), leaves)
			checkRepeats(t, leaves)
			shapes = append(shapes, shapeOf(f.log.Records()))
		})
	}
	for i := 1; i < len(shapes); i++ {
		if fmt.Sprint(shapes[i]) != fmt.Sprint(shapes[0]) {
			t.Errorf("workload %s's calls differ in shape from workload %s's", workloads[i].name, workloads[0].name)
		}
	}
}

// checkAccesses checks that the records are read/write pairs of one path
// each and returns the leaves read.
func checkAccesses(t *testing.T, g tree.Geometry, bucketSize int, recs []observe.Record) []uint64 {
	t.Helper()
	if len(recs) != 2*shapeOps {
		t.Fatalf("%d backend calls for %d accesses; want exactly 2 per access", len(recs), shapeOps)
	}
	layout := tree.Layout{Prefix: treePrefix}
	var leaves []uint64
	for i := 0; i < len(recs); i += 2 {
		rd, wr := recs[i], recs[i+1]
		if rd.Op != observe.OpRead || wr.Op != observe.OpWrite || rd.Err || wr.Err {
			t.Fatalf("access %d: calls %v then %v; want a read then a write", i/2, rd.Op, wr.Op)
		}
		if len(rd.Addrs) != g.L+1 || fmt.Sprint(rd.Addrs) != fmt.Sprint(wr.Addrs) {
			t.Fatalf("access %d: read %d addresses, wrote %d (or others); want the same L+1 = %d", i/2, len(rd.Addrs), len(wr.Addrs), g.L+1)
		}
		last, _ := layout.Bucket(rd.Addrs[g.L])
		leaf, ok := g.LeafOf(last)
		for lvl, a := range rd.Addrs {
			b, isBucket := layout.Bucket(a)
			if !ok || !isBucket || b != g.BucketAt(leaf, lvl) {
				t.Fatalf("access %d: addresses %q are not the root-to-leaf path of one leaf", i/2, rd.Addrs)
			}
			if rd.Sizes[lvl] != bucketSize || wr.Sizes[lvl] != bucketSize {
				t.Fatalf("access %d, level %d: read %d bytes, wrote %d; want one bucket, %d", i/2, lvl, rd.Sizes[lvl], wr.Sizes[lvl], bucketSize)
			}
		}
		leaves = append(leaves, leaf)
	}
	return leaves
}

func checkUniform(t *testing.T, g tree.Geometry, leaves []uint64) {
	t.Helper()
	chi := chiSquare(g, leaves)
	t.Logf("%d leaves read, chi-square %.1f over %d bins (critical %.2f at p = 0.001)", len(leaves), chi, chiBins, chiCritical)
	if chi > chiCritical {
		t.Errorf("leaves read are not uniform: chi-square %.1f > %.2f (p < 0.001)", chi, chiCritical)
	}
}

func checkRepeats(t *testing.T, leaves []uint64) {
	t.Helper()
	if n := repeats(leaves); n > maxRepeats {
		t.Errorf("%d of %d accesses read the same path as the access before; want at most %d (about %.1f expected)",
			n, len(leaves), maxRepeats, float64(len(leaves))/shapeCapacity)
	}
}

// repeats counts the accesses that read the path read just before.
func repeats(leaves []uint64) int {
	n := 0
	for i := 1; i < len(leaves); i++ {
		if leaves[i] == leaves[i-1] {
			n++
		}
	}
	return n
}

// chiSquare is the chi-square statistic of the leaves grouped into chiBins
// bins against the uniform distribution.
func chiSquare(g tree.Geometry, leaves []uint64) float64 {
	counts := make([]float64, chiBins)
	per := g.Leaves() / chiBins
	for _, l := range leaves {
		counts[l/per]++
	}
	want := float64(len(leaves)) / chiBins
	chi := 0.0
	for _, c := range counts {
		chi += (c - want) * (c - want) / want
	}
	return chi
}

// shapeOf is what the adversary sees of each call but the addresses.
func shapeOf(recs []observe.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprint(r.Op, r.Sizes)
	}
	return out
}

// The uniformity check can fail: leaves that are not uniform (as if a hot
// key were never remapped, so that its path is read again and again) are
// rejected, and so are leaves confined to half the tree.
func TestUniformityCheckRejects(t *testing.T) {
	g := tree.NewGeometry(shapeCapacity)
	r := rand.New(rand.NewPCG(1, 2))
	repeated, half, fair := make([]uint64, shapeOps), make([]uint64, shapeOps), make([]uint64, shapeOps)
	for i := range repeated {
		fair[i] = r.Uint64N(g.Leaves())
		half[i] = fair[i] / 2
		repeated[i] = fair[i]
		if i%10 == 0 {
			repeated[i] = 17 // a tenth of the reads on one path
		}
	}
	for name, leaves := range map[string][]uint64{"repeated": repeated, "half": half} {
		if chi := chiSquare(g, leaves); chi <= chiCritical {
			t.Errorf("%s leaves: chi-square %.1f, accepted as uniform", name, chi)
		}
	}
	if chi := chiSquare(g, fair); chi > chiCritical {
		t.Errorf("uniform leaves: chi-square %.1f, rejected", chi)
	}
	// A Get that does not remap its block: the next access to the key
	// reads the same path; the marginal distribution stays uniform.
	pairs := make([]uint64, shapeOps)
	for i := range pairs {
		pairs[i] = fair[i/2*2]
	}
	if n := repeats(pairs); n <= maxRepeats {
		t.Errorf("leaves read twice in a row: %d repeats, accepted", n)
	}
	if n := repeats(fair); n > maxRepeats {
		t.Errorf("uniform leaves: %d repeats, rejected", n)
	}
}

// Tampering with the tree alone (the saved state intact) is detected on
// access: a flipped bit, or a deleted bucket, gives ErrTampered.
func TestTamperedTree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(f *fixture, addrs map[string][]byte)
	}{
		{"flipped bit", func(f *fixture, addrs map[string][]byte) {
			var items []backend.Item
			for a, v := range addrs {
				v[len(v)/2] ^= 4
				items = append(items, backend.Item{Addr: a, Value: v})
			}
			if err := f.mem.Write(f.t.Context(), items); err != nil {
				f.t.Fatal(err)
			}
		}},
		{"deleted", func(f *fixture, addrs map[string][]byte) {
			var del []string
			for a := range addrs {
				del = append(del, a)
			}
			if err := f.mem.Delete(f.t.Context(), del); err != nil {
				f.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 16, 16, Options{})
			f.put("a", "v")
			if err := f.s.Close(); err != nil {
				t.Fatal(err)
			}
			tc.tamper(f, readAll(t, f.mem, treePrefix))
			f.s = f.open(nil)
			for _, k := range []string{"a", "missing"} {
				if _, _, err := f.s.Get(t.Context(), k); !errors.Is(err, kv.ErrTampered) {
					t.Errorf("Get(%q) on a tampered tree: %v; want kv.ErrTampered", k, err)
				}
			}
		})
	}
}
