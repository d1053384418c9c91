package tree

import (
	"context"
	"fmt"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/seal"
)

// ReadBuckets reads buckets in ONE backend.Read and returns the real
// blocks of each, in the order of buckets. versions[i] is the version
// bucket i was last written with (nil: all zero). A bucket missing from
// storage is tampering (the operator deleted it), never an empty bucket.
func ReadBuckets(ctx context.Context, b backend.Backend, l Layout, c *Codec, buckets, versions []uint64) ([][]Block, error) {
	if versions != nil && len(versions) != len(buckets) {
		return nil, fmt.Errorf("tree: %d versions for %d buckets", len(versions), len(buckets))
	}
	addrs := l.Addrs(buckets, make([]string, 0, len(buckets)))
	vals, err := b.Read(ctx, addrs)
	if err != nil {
		return nil, err
	}
	if len(vals) != len(addrs) {
		return nil, fmt.Errorf("tree: backend returned %d values for %d addresses", len(vals), len(addrs))
	}
	out := make([][]Block, len(buckets))
	for i, v := range vals {
		if v == nil {
			return nil, fmt.Errorf("%w: bucket %d is missing from storage", seal.ErrTampered, buckets[i])
		}
		if out[i], err = c.DecodeBucket(addrs[i], versionAt(versions, i), v); err != nil {
			return nil, fmt.Errorf("bucket %d: %w", buckets[i], err)
		}
	}
	return out, nil
}

// versionAt returns the version of bucket i: versions[i], or 0 for nil
// versions.
func versionAt(versions []uint64, i int) uint64 {
	if versions == nil {
		return 0
	}
	return versions[i]
}

// EncodeBuckets seals buckets (contents[i] the real blocks of bucket i,
// sealed under versions[i]; nil versions: all zero) as the items of one
// backend.Write.
func EncodeBuckets(l Layout, c *Codec, buckets, versions []uint64, contents [][]Block) ([]backend.Item, error) {
	if len(contents) != len(buckets) || (versions != nil && len(versions) != len(buckets)) {
		return nil, fmt.Errorf("tree: %d buckets, %d contents, %d versions", len(buckets), len(contents), len(versions))
	}
	items := make([]backend.Item, len(buckets))
	for i, bucket := range buckets {
		addr := l.Addr(bucket)
		data, err := c.EncodeBucket(addr, versionAt(versions, i), contents[i])
		if err != nil {
			return nil, fmt.Errorf("bucket %d: %w", bucket, err)
		}
		items[i] = backend.Item{Addr: addr, Value: data}
	}
	return items, nil
}

// WriteBuckets seals buckets with fresh randomness and writes them in ONE
// atomic backend.Write (see EncodeBuckets).
func WriteBuckets(ctx context.Context, b backend.Backend, l Layout, c *Codec, buckets, versions []uint64, contents [][]Block) error {
	items, err := EncodeBuckets(l, c, buckets, versions, contents)
	if err != nil {
		return err
	}
	return b.Write(ctx, items)
}

// DefaultBatchBytes is the usual size of one backend write of a bulk
// initialisation.
const DefaultBatchBytes = 4 << 20

// BatchWriter writes many items (a whole tree at initialisation or bulk
// load) in backend writes of about MaxBytes each, never one per item. Each
// batch is atomic; the whole is not.
type BatchWriter struct {
	B        backend.Backend
	MaxBytes int // default DefaultBatchBytes

	items []backend.Item
	size  int
}

// Add queues an item, writing the batch once it reaches MaxBytes.
func (w *BatchWriter) Add(ctx context.Context, it backend.Item) error {
	w.items = append(w.items, it)
	w.size += len(it.Addr) + len(it.Value)
	limit := w.MaxBytes
	if limit <= 0 {
		limit = DefaultBatchBytes
	}
	if w.size >= limit {
		return w.Flush(ctx)
	}
	return nil
}

// Flush writes the queued items, if any.
func (w *BatchWriter) Flush(ctx context.Context) error {
	if len(w.items) == 0 {
		return nil
	}
	err := w.B.Write(ctx, w.items)
	clear(w.items)
	w.items, w.size = w.items[:0], 0
	return err
}
