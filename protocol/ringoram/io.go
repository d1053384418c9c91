package ringoram

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// Below these many items per goroutine, sealing and opening stay on one
// goroutine.
const (
	metasPerWorker   = 256
	slotsPerWorker   = 16
	bucketsPerWorker = 4
)

// forChunks calls fn on consecutive chunks of [0, n), in parallel across
// up to GOMAXPROCS goroutines when there are at least 2*minPer items, and
// returns the first error.
func forChunks(n, minPer int, fn func(lo, hi int) error) error {
	w := min(runtime.GOMAXPROCS(0), n/minPer)
	if w <= 1 {
		return fn(0, n)
	}
	errs := make([]error, w)
	var wg sync.WaitGroup
	for c := range w {
		wg.Go(func() { errs[c] = fn(n*c/w, n*(c+1)/w) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// read is ONE backend Read of addrs (readLists).
func (t *Tree) read(ctx context.Context, addrs []string) ([][]byte, error) {
	vals, err := t.readLists(ctx, [][]string{addrs})
	if err != nil {
		return nil, err
	}
	return vals[0], nil
}

// readLists is ONE backend Read of each address list, in order and in
// one round trip (backend.Pipeline), after the last operation's Write if
// it has not reached storage yet. A missing address is tampering: the
// storage operator deleted it (a missing bucket is never empty).
func (t *Tree) readLists(ctx context.Context, lists [][]string) ([][][]byte, error) {
	vals, err := backend.Pipeline(ctx, t.b, t.pending, lists)
	if err != nil {
		return nil, err
	}
	t.pending = nil
	if len(vals) != len(lists) {
		return nil, fmt.Errorf("%w: storage answered %d Reads of %d", seal.ErrTampered, len(vals), len(lists))
	}
	for i, addrs := range lists {
		if len(vals[i]) != len(addrs) {
			return nil, fmt.Errorf("%w: storage returned %d values for %d addresses", seal.ErrTampered, len(vals[i]), len(addrs))
		}
		for j, v := range vals[i] {
			if v == nil {
				return nil, fmt.Errorf("%w: %s is missing from storage", seal.ErrTampered, t.l.describe(addrs[j]))
			}
		}
	}
	return vals, nil
}

// readAgain reads the address lists (readLists), and while storage
// fails the Read issues the identical Read again (backend.Retry), until
// it succeeds, ctx ends or the Tree is abandoned: a Read of slots may have
// reached storage, so the slots it chose are spent.
func (t *Tree) readAgain(ctx context.Context, lists [][]string) ([][][]byte, error) {
	var vals [][][]byte
	err := backend.Retry(ctx, t.abandon, func() { t.stats.ReadRetries++ }, func() (err error) {
		vals, err = t.readLists(ctx, lists)
		return err
	})
	return vals, err
}

// readMeta returns the metadata of buckets: from the Tree's trusted copy
// (metaCache) where it has one, the rest in ONE backend Read, opened and
// checked against the version the Tree expects (an older one is a
// replay), and kept. Which buckets are read depends only on which buckets
// earlier operations touched since the Tree was made or restored.
func (t *Tree) readMeta(ctx context.Context, buckets []uint64) ([]meta, error) {
	metas := t.newMetas(len(buckets))
	var cold []int // indices into buckets
	for i, b := range buckets {
		if !t.cache.get(&metas[i], b, t.p, t.g) {
			cold = append(cold, i)
		}
	}
	if len(cold) == 0 {
		return metas, nil
	}
	addrs := make([]string, len(cold))
	for j, i := range cold {
		addrs[j] = t.l.MetaAddr(buckets[i])
	}
	vals, err := t.read(ctx, addrs)
	if err != nil {
		return nil, err
	}
	err = forChunks(len(cold), metasPerWorker, func(lo, hi int) error {
		var sc metaScratch
		for j := lo; j < hi; j++ {
			i := cold[j]
			if err := t.openMeta(&metas[i], buckets[i], addrs[j], vals[j], &sc); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.stats.MetaReads += uint64(len(cold))
	for _, i := range cold {
		t.cache.put(buckets[i], &metas[i])
	}
	return metas, nil
}

// newMetas returns n metadata records with room for Z entries each.
func (t *Tree) newMetas(n int) []meta {
	metas := make([]meta, n)
	entries := make([]entry, n*t.p.Z)
	for i := range metas {
		metas[i].Entries = entries[i*t.p.Z : (i+1)*t.p.Z : (i+1)*t.p.Z]
	}
	return metas
}

// copyMetas returns a copy of metas that shares no entries with them.
func (t *Tree) copyMetas(metas []meta) []meta {
	out := t.newMetas(len(metas))
	for i, m := range metas {
		entries := out[i].Entries
		copy(entries, m.Entries)
		out[i] = m
		out[i].Entries = entries
	}
	return out
}

// metaScratch is one goroutine's buffers for sealing and opening
// metadata records one after the other: the associated data (the record's
// address) and the plaintext.
type metaScratch struct{ ad, plain []byte }

// openMeta opens bucket's sealed metadata into m, at the version the Tree
// expects.
func (t *Tree) openMeta(m *meta, bucket uint64, addr string, sealed []byte, sc *metaScratch) error {
	if err := t.decodeMeta(m, bucket, addr, sealed, sc); err != nil {
		return err
	}
	if m.Version != t.versions[bucket] {
		return fmt.Errorf("%w: metadata of bucket %d has version %d, want %d (replayed)",
			seal.ErrTampered, bucket, m.Version, t.versions[bucket])
	}
	return nil
}

// decodeMeta opens bucket's sealed metadata into m, at any version.
func (t *Tree) decodeMeta(m *meta, bucket uint64, addr string, sealed []byte, sc *metaScratch) error {
	sc.ad = append(sc.ad[:0], addr...)
	plain, err := t.keys.Open(sc.plain[:0], sc.ad, sealed)
	if err == nil {
		sc.plain = plain
		err = m.parse(plain, t.p, t.g, bucket)
	}
	if err != nil {
		return fmt.Errorf("ringoram: metadata of bucket %d: %w", bucket, err)
	}
	return nil
}

// slotRead is one slot to read: slot slot of bucket union[i].
type slotRead struct {
	i    int32
	slot uint8
}

// readSlotLists reads each list of slots of buckets of union in ONE
// backend Read, all in one round trip, and opens them in parallel. Each
// must agree with its bucket's metadata: the slot of a real entry holds
// that block, any other slot a dummy. It returns the block of each read
// (the zero Block for a dummy), by list.
func (t *Tree) readSlotLists(ctx context.Context, union []uint64, metas []meta, lists [][]slotRead) ([][]tree.Block, error) {
	addrs := make([][]string, len(lists))
	for i, reads := range lists {
		addrs[i] = make([]string, len(reads))
		for j, r := range reads {
			addrs[i][j] = t.l.SlotAddr(union[r.i], int(r.slot))
		}
	}
	vals, err := t.readAgain(ctx, addrs)
	if err != nil {
		return nil, err
	}
	out := make([][]tree.Block, len(lists))
	for i := range lists {
		if out[i], err = t.openSlots(union, metas, lists[i], vals[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// openSlots opens the values vals of the slots reads in parallel.
func (t *Tree) openSlots(union []uint64, metas []meta, reads []slotRead, vals [][]byte) ([]tree.Block, error) {
	out := make([]tree.Block, len(reads))
	err := forChunks(len(reads), slotsPerWorker, func(lo, hi int) error {
		for j := lo; j < hi; j++ {
			r := reads[j]
			b, err := t.openSlot(union[r.i], &metas[r.i], r.slot, vals[j])
			if err != nil {
				return err
			}
			out[j] = b
		}
		return nil
	})
	return out, err
}

// openSlot opens one slot of bucket and checks it against m.
func (t *Tree) openSlot(bucket uint64, m *meta, slot uint8, data []byte) (tree.Block, error) {
	b, real, err := t.codec.DecodeSlot(t.l.bucketAddr(bucket), m.SlotVersion, int(slot), data)
	if err != nil {
		return tree.Block{}, fmt.Errorf("ringoram: slot %d of bucket %d: %w", slot, bucket, err)
	}
	e := m.entryAt(slot)
	if real != (e != nil) || real && b.ID != e.ID {
		return tree.Block{}, fmt.Errorf("%w: slot %d of bucket %d disagrees with its metadata", seal.ErrTampered, slot, bucket)
	}
	return b, nil
}

// bucketWrite is one bucket of a Write: its new metadata and, for a full
// rewrite, the block of each of its Z+S slots (nil for a dummy).
type bucketWrite struct {
	bucket uint64
	meta   *meta
	slots  []*tree.Block // nil: metadata only
}

// write seals ws in parallel and stores them in ONE atomic backend Write,
// so a bucket's slots and its metadata always change together (Sec.
// 5.3.3).
func (t *Tree) write(ctx context.Context, ws []bucketWrite) error {
	items, err := t.encode(ws)
	if err != nil {
		return err
	}
	return t.b.Write(ctx, items)
}

// encode seals ws into the items of one backend Write: per bucket its
// slots (for a full rewrite), then its metadata. All values share one
// buffer.
func (t *Tree) encode(ws []bucketWrite) ([]backend.Item, error) {
	metaSize := metaPlainSize(t.p.Z) + t.keys.Overhead()
	itemAt, byteAt := make([]int, len(ws)+1), make([]int, len(ws)+1)
	for i, w := range ws {
		itemAt[i+1], byteAt[i+1] = itemAt[i]+1+len(w.slots), byteAt[i]+metaSize+len(w.slots)*t.codec.SlotSize()
	}
	items, buf := make([]backend.Item, itemAt[len(ws)]), make([]byte, byteAt[len(ws)])
	err := forChunks(len(ws), bucketsPerWorker, func(lo, hi int) error {
		var sc metaScratch
		for i := lo; i < hi; i++ {
			if err := t.encodeBucket(ws[i], items[itemAt[i]:itemAt[i+1]], buf[byteAt[i]:byteAt[i+1]], &sc); err != nil {
				return err
			}
		}
		return nil
	})
	return items, err
}

// encodeBucket seals w into items, using buf (exactly large enough) for
// the values.
func (t *Tree) encodeBucket(w bucketWrite, items []backend.Item, buf []byte, sc *metaScratch) error {
	size := t.codec.SlotSize()
	n := len(w.slots) * size
	if w.slots != nil {
		sealed, err := t.codec.EncodeSlots(buf[:0:n], t.l.bucketAddr(w.bucket), w.meta.SlotVersion, w.slots)
		if err != nil {
			return fmt.Errorf("ringoram: bucket %d: %w", w.bucket, err)
		}
		for s := range w.slots {
			items[s] = backend.Item{Addr: t.l.SlotAddr(w.bucket, s), Value: sealed[s*size : (s+1)*size : (s+1)*size]}
		}
	}
	maddr := t.l.MetaAddr(w.bucket)
	sc.ad, sc.plain = append(sc.ad[:0], maddr...), w.meta.appendPlain(sc.plain[:0])
	sealed := t.keys.Seal(buf[n:n:len(buf)], sc.ad, sc.plain)
	items[len(w.slots)] = backend.Item{Addr: maddr, Value: sealed}
	return nil
}

// commit installs the new versions of a successful Write and drops the
// stale entries of the buckets it rewrote in full.
func (t *Tree) commit(ws []bucketWrite) {
	for _, w := range ws {
		t.versions[w.bucket] = w.meta.Version
		t.cache.put(w.bucket, w.meta)
		if w.slots != nil {
			delete(t.stale, w.bucket)
		}
	}
}
