package pathoram

import (
	"fmt"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// BenchmarkAccess measures one access (a Get of a present key) of a store
// of 2^12 keys with 1 KiB values on the in-memory backend: the protocol's
// own cost (sealing, flushing), without storage latency.
func BenchmarkAccess(b *testing.B) {
	const n = 1 << 12
	ctx := b.Context()
	s, err := kv.Open(ctx, kv.Config{Protocol: "pathoram", Backend: mem.New(), Keys: kvtest.NewKeys(b),
		Capacity: n, ValueSize: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := range n / 2 {
		if err := s.Put(ctx, fmt.Sprint(i), make([]byte, 1024)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, _, err := s.Get(ctx, fmt.Sprint(i%(n/2))); err != nil {
			b.Fatal(err)
		}
	}
}
