package tree

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
)

func tapped() (*observe.Tap, *observe.MemoryLog) {
	log := &observe.MemoryLog{}
	return observe.NewTap(mem.New(), log), log
}

func TestReadWriteBuckets(t *testing.T) {
	ctx := t.Context()
	b, log := tapped()
	l, c := Layout{Prefix: "t/"}, NewCodec(kvtest.NewKeys(t), 4, 32)
	r := rand.New(rand.NewPCG(6, 6))
	g := Geometry{L: 4}
	path := g.Path(5, nil)
	versions := make([]uint64, len(path))
	contents := make([][]Block, len(path))
	for i := range path {
		versions[i] = uint64(10 + i)
		contents[i] = randomBlocks(r, r.IntN(5), 32)
	}
	if err := WriteBuckets(ctx, b, l, c, path, versions, contents); err != nil {
		t.Fatal(err)
	}
	got, err := ReadBuckets(ctx, b, l, c, path, versions)
	if err != nil {
		t.Fatal(err)
	}
	for i := range path {
		if !sameBlocks(got[i], contents[i]) {
			t.Fatalf("bucket %d read back differs", path[i])
		}
	}
	recs := log.Records()
	if len(recs) != 2 || recs[0].Op != observe.OpWrite || recs[1].Op != observe.OpRead ||
		len(recs[0].Addrs) != len(path) || len(recs[1].Addrs) != len(path) {
		t.Fatalf("backend calls: %+v; want one write and one read of %d addresses", recs, len(path))
	}
	for i, s := range recs[0].Sizes {
		if s != c.BucketSize() || recs[0].Addrs[i] != recs[1].Addrs[i] {
			t.Fatalf("write %d: address %q, %d bytes; want %q, %d", i, recs[0].Addrs[i], s, recs[1].Addrs[i], c.BucketSize())
		}
	}

	stale := append([]uint64(nil), versions...)
	stale[2]--
	if _, err := ReadBuckets(ctx, b, l, c, path, stale); !errors.Is(err, kv.ErrTampered) {
		t.Errorf("read expecting an older version of one bucket: %v; want kv.ErrTampered", err)
	}
	if err := b.Delete(ctx, []string{l.Addr(path[3])}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBuckets(ctx, b, l, c, path, versions); !errors.Is(err, kv.ErrTampered) {
		t.Errorf("read of a deleted bucket: %v; want kv.ErrTampered (a missing bucket is never empty)", err)
	}
	if _, err := ReadBuckets(ctx, b, l, c, path, versions[:2]); err == nil || errors.Is(err, kv.ErrTampered) {
		t.Errorf("read with too few versions: %v; want a usage error", err)
	}
	if err := WriteBuckets(ctx, b, l, c, path, nil, contents[:1]); err == nil {
		t.Error("write with too few contents succeeded")
	}
}

func TestBatchWriter(t *testing.T) {
	ctx := t.Context()
	b, log := tapped()
	w := BatchWriter{B: b, MaxBytes: 1000}
	for i := range 25 {
		if err := w.Add(ctx, backend.Item{Addr: "x" + string(rune('a'+i)), Value: make([]byte, 99)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil { // nothing queued: no call
		t.Fatal(err)
	}
	recs := log.Records()
	var n int
	for _, r := range recs {
		n += len(r.Addrs)
	}
	// 100 bytes per item, 1000 per batch: batches of 10, 10 and 5.
	if len(recs) != 3 || n != 25 || len(recs[0].Addrs) != 10 || len(recs[2].Addrs) != 5 {
		t.Fatalf("%d writes of %d items in all; want batches of 10, 10, 5", len(recs), n)
	}
}
