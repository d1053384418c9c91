package ringoram

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// benchTree is an empty tree of 2^13 leaves with 1 KiB values (an
// eviction of 200 paths rewrites about 1,500 buckets).
func benchTree(b *testing.B) *Driver {
	tr, err := NewDriver(Config{Backend: mem.New(), Keys: kvtest.NewKeys(b), Geometry: tree.Geometry{L: 13},
		Params: Params{Z: PaperZ, S: PaperS}, Layout: Layout{Prefix: "b/"}, ValueSize: 1024})
	if err != nil {
		b.Fatal(err)
	}
	if err := tr.Init(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	return tr
}

func BenchmarkEvict200(b *testing.B) {
	tr := benchTree(b)
	r := rand.New(rand.NewPCG(1, 1))
	stash := make([]Block, 200)
	for i := range stash {
		stash[i].Block = randomBlock(r, 1024)
	}
	var buckets uint64
	for b.Loop() {
		for i := range stash {
			stash[i].Leaf = r.Uint64N(tr.g.Leaves())
		}
		if _, err := tr.Evict(context.Background(), 200, stash); err != nil {
			b.Fatal(err)
		}
		buckets = tr.Stats().BucketsWritten
	}
	b.ReportMetric(float64(buckets-tr.g.Buckets())/float64(b.N), "buckets/op")
}

func BenchmarkReadPaths200(b *testing.B) {
	tr := benchTree(b)
	r := rand.New(rand.NewPCG(2, 2))
	reqs := make([]PathRead, 200)
	for b.Loop() {
		for i := range reqs {
			reqs[i].Leaf = r.Uint64N(tr.g.Leaves())
		}
		if _, err := tr.ReadPaths(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tr.Stats().BucketsRead)/float64(tr.Stats().MultiReads), "buckets/op")
}
