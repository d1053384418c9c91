//go:build soak

package pathoram

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestSoakStash is the long stash measurement, behind the soak build tag:
//
//	go test -tags soak -run Soak -v -timeout 60m ./protocol/pathoram/
//
// A real store (sealed buckets on the in-memory backend) of N = 2^16 keys,
// filled to capacity by bulk load, serves 1M accesses alternating reads
// and overwrites of uniformly random keys (every read checked); the stash
// must stay under stashBound. It takes a few minutes.
func TestSoakStash(t *testing.T) {
	const n, accesses = 1 << 16, 1_000_000
	ctx := t.Context()
	s, err := kv.Open(ctx, kv.Config{Protocol: "pathoram", Backend: mem.New(), Keys: kvtest.NewKeys(t),
		Capacity: n, ValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := func(i int) string { return fmt.Sprint("soak/", i) }
	l, ok := kv.AsLoader(s)
	if !ok {
		t.Fatal("pathoram has no bulk loader")
	}
	items := func(yield func(string, []byte) bool) {
		for i := range n {
			if !yield(key(i), make([]byte, 8)) {
				return
			}
		}
	}
	if got, err := l.Load(ctx, items); err != nil || got != n {
		t.Fatalf("Load = %d, %v", got, err)
	}
	model := make([]uint64, n)
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	for i := range accesses {
		k := r.IntN(n)
		if i%2 == 1 {
			model[k]++
			if err := s.Put(ctx, key(k), binary.BigEndian.AppendUint64(nil, model[k])); err != nil {
				t.Fatal(err)
			}
			continue
		}
		v, ok, err := s.Get(ctx, key(k))
		if err != nil || !ok || binary.BigEndian.Uint64(v) != model[k] {
			t.Fatalf("access %d: Get(%s) = %x, %v, %v; want %d", i, key(k), v, ok, err, model[k])
		}
		if i%100_000 == 0 {
			t.Logf("%d accesses, %v, stash max %v", i, time.Since(start).Round(time.Second), kvtest.Stat(t, s.Stats(), "stash_max"))
		}
	}
	got := int(kvtest.Stat(t, s.Stats(), "stash_max"))
	t.Logf("N=2^16, %d accesses in %v: stash high-water mark %d blocks (bound %d)", accesses, time.Since(start).Round(time.Second), got, stashBound)
	if got > stashBound {
		t.Errorf("stash reached %d blocks; bound %d", got, stashBound)
	}
}
