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
func (d *Driver) read(ctx context.Context, addrs []string, carry bool) ([][]byte, error) {
	vals, err := d.readLists(ctx, [][]string{addrs}, carry)
	if err != nil {
		return nil, err
	}
	return vals[0], nil
}

// readLists is ONE backend Read of each address list, in order and in
// one round trip (backend.Pipeline), after the committed operations'
// Writes that have not reached storage yet when it carries them. A
// missing address is tampering: the storage operator deleted it (a
// missing bucket is never empty).
func (d *Driver) readLists(ctx context.Context, lists [][]string, carry bool) ([][][]byte, error) {
	var items []backend.Item
	if carry {
		var err error
		if items, err = d.held.take(); err != nil {
			return nil, err
		}
	}
	vals, err := backend.Pipeline(ctx, d.b, items, lists)
	if err != nil {
		d.held.giveBack(items)
		return nil, err
	}
	if len(vals) != len(lists) {
		return nil, fmt.Errorf("%w: storage answered %d Reads of %d", seal.ErrTampered, len(vals), len(lists))
	}
	for i, addrs := range lists {
		if len(vals[i]) != len(addrs) {
			return nil, fmt.Errorf("%w: storage returned %d values for %d addresses", seal.ErrTampered, len(vals[i]), len(addrs))
		}
		for j, v := range vals[i] {
			if v == nil {
				return nil, fmt.Errorf("%w: %s is missing from storage", seal.ErrTampered, d.l.describe(addrs[j]))
			}
		}
	}
	return vals, nil
}

// readAgain reads the address lists (readLists), and while storage
// fails the Read issues the identical Read again (backend.Retry), until
// it succeeds, ctx ends or the Driver is abandoned: a Read of slots may
// have reached storage, so the slots it chose are spent.
func (d *Driver) readAgain(ctx context.Context, lists [][]string, carry bool) ([][][]byte, error) {
	var vals [][][]byte
	err := backend.Retry(ctx, d.abandon, func() { d.retries.Add(1) }, func() (err error) {
		vals, err = d.readLists(ctx, lists, carry)
		return err
	})
	return vals, err
}

// ReadMetas reads the metadata records of buckets in ONE backend Read and
// opens them (at any version: the Tree checks them), in parallel. The
// plaintexts share one buffer.
func (d *Driver) ReadMetas(ctx context.Context, buckets []uint64) ([][]byte, error) {
	return d.readMetas(ctx, buckets, true)
}

// ReadMetasBeside is ReadMetas for an operation that started beside
// others (Tree.Beside): it carries none of the Writes held, which go with
// the Read of an operation that avoids their buckets.
func (d *Driver) ReadMetasBeside(ctx context.Context, buckets []uint64) ([][]byte, error) {
	return d.readMetas(ctx, buckets, false)
}

func (d *Driver) readMetas(ctx context.Context, buckets []uint64, carry bool) ([][]byte, error) {
	addrs := make([]string, len(buckets))
	for i, b := range buckets {
		addrs[i] = d.l.MetaAddr(b)
	}
	vals, err := d.read(ctx, addrs, carry)
	if err != nil {
		return nil, err
	}
	size := metaPlainSize(d.p.Z)
	plains, buf := make([][]byte, len(buckets)), make([]byte, len(buckets)*size)
	err = forChunks(len(buckets), metasPerWorker, func(lo, hi int) error {
		var ad []byte
		for i := lo; i < hi; i++ {
			ad = append(ad[:0], addrs[i]...)
			plain, err := d.keys.Open(buf[i*size:i*size:(i+1)*size], ad, vals[i])
			if err != nil {
				return fmt.Errorf("ringoram: metadata of bucket %d: %w", buckets[i], err)
			}
			plains[i] = plain
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return plains, nil
}

// ReadSlots reads each list of slots in ONE backend Read, all in one
// round trip, issuing it again unchanged while storage fails it
// (readAgain), and opens them in parallel. Each must agree with its
// bucket's metadata: a slot read as Real holds that block, any other a
// dummy. It returns the real blocks read, by list, in order.
func (d *Driver) ReadSlots(ctx context.Context, lists [][]SlotRead) ([][]tree.Block, error) {
	return d.readSlots(ctx, lists, true)
}

// ReadSlotsBeside is ReadSlots for an operation that started beside
// others (ReadMetasBeside).
func (d *Driver) ReadSlotsBeside(ctx context.Context, lists [][]SlotRead) ([][]tree.Block, error) {
	return d.readSlots(ctx, lists, false)
}

func (d *Driver) readSlots(ctx context.Context, lists [][]SlotRead, carry bool) ([][]tree.Block, error) {
	addrs := make([][]string, len(lists))
	for i, reads := range lists {
		addrs[i] = make([]string, len(reads))
		for j, r := range reads {
			addrs[i][j] = d.l.SlotAddr(r.Bucket, int(r.Slot))
		}
	}
	vals, err := d.readAgain(ctx, addrs, carry)
	if err != nil {
		return nil, err
	}
	out := make([][]tree.Block, len(lists))
	for i := range lists {
		if out[i], err = d.openSlots(lists[i], vals[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// openSlots opens the values vals of the slots reads in parallel and
// returns the real blocks among them, in order.
func (d *Driver) openSlots(reads []SlotRead, vals [][]byte) ([]tree.Block, error) {
	out := make([]tree.Block, len(reads))
	err := forChunks(len(reads), slotsPerWorker, func(lo, hi int) error {
		for j := lo; j < hi; j++ {
			b, err := d.openSlot(reads[j], vals[j])
			if err != nil {
				return err
			}
			out[j] = b
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	reals := out[:0] // in place: the j-th real block is at j or later
	for j, r := range reads {
		if r.Real {
			reals = append(reals, out[j])
		}
	}
	return reals, nil
}

// openSlot opens one slot and checks it against its bucket's metadata.
func (d *Driver) openSlot(r SlotRead, data []byte) (tree.Block, error) {
	b, real, err := d.codec.DecodeSlot(d.l.bucketAddr(r.Bucket), r.SlotVersion, int(r.Slot), data)
	if err != nil {
		return tree.Block{}, fmt.Errorf("ringoram: slot %d of bucket %d: %w", r.Slot, r.Bucket, err)
	}
	if real != r.Real || real && b.ID != r.ID {
		return tree.Block{}, fmt.Errorf("%w: slot %d of bucket %d disagrees with its metadata", seal.ErrTampered, r.Slot, r.Bucket)
	}
	return b, nil
}

// write seals ws and stores them in ONE atomic backend Write, so a
// bucket's slots and its metadata always change together (Sec. 5.3.3).
func (d *Driver) write(ctx context.Context, ws []BucketWrite) error {
	items, err := d.Seal(ws)
	if err != nil {
		return err
	}
	return d.b.Write(ctx, items)
}

// Seal seals ws, in parallel, into the items of one backend Write: per
// bucket its slots (for a full rewrite), then its metadata. Every seal
// draws a fresh random nonce. All values share one buffer.
func (d *Driver) Seal(ws []BucketWrite) ([]backend.Item, error) {
	metaSize := metaPlainSize(d.p.Z) + d.keys.Overhead()
	itemAt, byteAt := make([]int, len(ws)+1), make([]int, len(ws)+1)
	for i, w := range ws {
		n := 0
		if w.Full {
			n = d.p.slots()
		}
		itemAt[i+1], byteAt[i+1] = itemAt[i]+1+n, byteAt[i]+metaSize+n*d.codec.SlotSize()
	}
	items, buf := make([]backend.Item, itemAt[len(ws)]), make([]byte, byteAt[len(ws)])
	err := forChunks(len(ws), bucketsPerWorker, func(lo, hi int) error {
		sc := sealScratch{slots: make([]*tree.Block, d.p.slots())}
		for i := lo; i < hi; i++ {
			if err := d.sealBucket(ws[i], items[itemAt[i]:itemAt[i+1]], buf[byteAt[i]:byteAt[i+1]], &sc); err != nil {
				return err
			}
		}
		return nil
	})
	return items, err
}

// sealScratch is one goroutine's buffers for sealing buckets one after
// the other: a bucket's slots and its metadata record's address, the
// associated data.
type sealScratch struct {
	slots []*tree.Block
	ad    []byte
}

// sealBucket seals w into items, using buf (exactly large enough) for
// the values.
func (d *Driver) sealBucket(w BucketWrite, items []backend.Item, buf []byte, sc *sealScratch) error {
	size := d.codec.SlotSize()
	n := 0
	if w.Full {
		slots := sc.slots
		clear(slots)
		for i := range w.Reals {
			slots[w.Reals[i].Slot] = &w.Reals[i].Block
		}
		n = len(slots) * size
		sealed, err := d.codec.EncodeSlots(buf[:0:n], d.l.bucketAddr(w.Bucket), w.SlotVersion, slots)
		if err != nil {
			return fmt.Errorf("ringoram: bucket %d: %w", w.Bucket, err)
		}
		for s := range slots {
			items[s] = backend.Item{Addr: d.l.SlotAddr(w.Bucket, s), Value: sealed[s*size : (s+1)*size : (s+1)*size]}
		}
	}
	maddr := d.l.MetaAddr(w.Bucket)
	sc.ad = append(sc.ad[:0], maddr...)
	items[len(items)-1] = backend.Item{Addr: maddr, Value: d.keys.Seal(buf[n:n:len(buf)], sc.ad, w.Meta)}
	return nil
}
