package backendtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
)

// benchShapes are the batches BenchFenced writes, shaped like the writes
// fencing will guard: a treebeard eviction (40 buckets' slots of 1.1 KiB)
// and oblivistore's write-backs of a shuffled level (16 sealed 1 KiB
// slots) and of a small one (2 slots).
var benchShapes = []struct {
	name       string
	items, len int
}{
	{"TreebeardEviction40x1126B", 40, 1126},
	{"OblivistoreLevel16x1061B", 16, 1061},
	{"OblivistoreSmall2x1061B", 2, 1061},
}

// benchAddrs is how many addresses a shape's batches cycle through.
const benchAddrs = 4096

// BenchFenced measures what fencing costs per write on bk: for each
// shape, every iteration issues one Write and one WriteFenced of the
// same shape, alternating so that both see the same load, and reports
// their times (write-ns, fenced-ns) and the ratio fenced/write. The
// fenced writes of a shape share one token, claimed before they start, as
// a driver's writes within one incarnation do.
func BenchFenced(b *testing.B, bk backend.Backend) {
	var token uint64 // grows across every run of every shape
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			ctx := context.Background()
			value := make([]byte, shape.len)
			for i := range value {
				value[i] = byte(i)
			}
			token++
			fence := backend.Fence{Key: "fence/bench", Token: token}
			if err := bk.WriteFenced(ctx, fence, nil); err != nil { // the driver's claim
				b.Fatal(err)
			}
			var plain, fenced time.Duration
			b.SetBytes(int64(2 * shape.items * shape.len))
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if err := bk.Write(ctx, benchBatch("plain", i, shape.items, value)); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := bk.WriteFenced(ctx, fence, benchBatch("fenced", i, shape.items, value)); err != nil {
					b.Fatal(err)
				}
				plain, fenced = plain+mid.Sub(start), fenced+time.Since(mid)
			}
			b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N), "write-ns")
			b.ReportMetric(float64(fenced.Nanoseconds())/float64(b.N), "fenced-ns")
			b.ReportMetric(float64(fenced)/float64(plain), "fenced/write")
		})
	}
}

// benchBatch returns the i-th batch of n items of value under prefix,
// cycling through benchAddrs addresses.
func benchBatch(prefix string, i, n int, value []byte) []backend.Item {
	items := make([]backend.Item, n)
	for k := range items {
		items[k] = backend.Item{Addr: fmt.Sprintf("bench/%s/%d", prefix, (i*n+k)%benchAddrs), Value: value}
	}
	return items
}
