// Package slots is an embedded on-disk backend.Backend that keeps each
// value in a slot of a file of equal-sized slots, found through an index
// held in memory. It is the disk backend's default engine.
//
// Every protocol stores sealed blocks of a few fixed sizes at a fixed set
// of addresses and rewrites them again and again. An LSM store (package
// disk, over pebble) pays for that with point reads across its levels and
// with compactions that merge the overwrites; here a read is a lookup in
// memory and one pread, and a write one pwrite into a free slot of the
// value's size. No maintained Go library stores values this way behind
// atomic multi-address batches, which is why it is written here
// (docs/dependencies.md, "Slot storage").
//
// What it owns: one directory holding one file of slots per slot size
// (slotSize), the generation of the last sync point (SYNCED), and a LOCK
// file that keeps a second process out. Each slot names its address and
// the generation of the Write that put it there, so an open rebuilds the
// index by reading the slots (load): an address's value is its slot of
// the highest generation no later than the last sync point.
//
// Atomicity and crashes: every call holds the stripes of its addresses
// (stripes), so a Read sees all of a Write or none of it. Each Write is
// a generation; its values go to free slots, and the index takes the
// whole batch at once. A sync point waits for every Write begun before
// it to finish, fsyncs the slot files and then records the last
// generation among them, G, so
// after a crash the store is exactly as it was at its last sync point: a
// prefix of the Writes, whole, which a journaled store's recovery relies
// on (it redoes the Writes after it). A slot a Write replaced is reused
// only once a sync point covers that Write. Sync points come from Sync
// (the journal's checkpoints), Close, and in the background once
// syncInterval has passed or enough replaced slots wait. By default a
// Write also returns only once its slots are fsynced (concurrent Writes
// share the fsync), and its slots say so: an open takes such a Write
// after the last sync point if all of its slots are whole. Under
// Options.NoSync or DeferSync a Write returns at once.
//
// It must never log or inspect values or addresses, never split a batch,
// never hand callers memory it still owns, and never reuse a slot that
// an open could still take for an address's value.
package slots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/oblivkv/oblivkv/backend"
)

// ErrCorrupt reports a value whose slot fails its checksum: storage
// changed under the backend.
var ErrCorrupt = errors.New("slots: a value fails its checksum (the slot file was changed or damaged)")

// The triggers of a background sync point under NoSync or DeferSync: a
// Write asks for one once syncInterval has passed since the last, or once
// maxPending replaced slots (the space they hold) wait. A Write makes one
// itself once 4*maxPending wait: the background falls behind.
const (
	syncInterval = time.Second
	maxPending   = 1 << 16
)

// Options tune a slots backend. The zero value is the safe default.
type Options struct {
	// NoSync skips the fsyncs of each Write and Delete. Close still
	// makes everything durable; a crash may lose acknowledged calls.
	NoSync bool
	// ReadOnly opens an existing store without writing to it (a missing
	// one is an error); Writes, Deletes and Checkpoint fail.
	ReadOnly bool
	// FS is the file system the backend lives in; nil means the
	// operating system's (tests use pebble's crash-simulating MemFS).
	FS vfs.FS
}

// ErrReadOnly is returned by the writes of a backend opened ReadOnly.
var ErrReadOnly = errors.New("slots: the store is open read-only")

// Backend is a backend.Backend stored in slot files.
type Backend struct {
	dir      string
	fs       vfs.FS
	lock     io.Closer
	deferred atomic.Bool // sync points come from Sync, Close and the background: Options.NoSync or DeferSync

	life     sync.RWMutex // read-held by every call, write-held by Close and Checkpoint
	closed   bool
	readOnly bool

	mu  sync.RWMutex // the in-memory index: read-held to look up, write-held to change it
	idx *index
	cs  *classes

	commitMu sync.Mutex          // guards the generations and the replaced slots
	finished sync.Cond           // on commitMu: a Write is no longer under way
	nextGen  uint64              // the next Write's generation
	inflight map[uint64]struct{} // generations of the Writes under way
	pending  []replaced          // slots replaced since the last sync point
	synced   time.Time           // when the last sync point began

	syncMu   sync.Mutex    // one sync point at a time; guards durable
	durable  uint64        // the generation of the last sync point
	marker   *syncMarker   // where it is recorded
	syncs    atomic.Uint64 // sync points since the store was opened
	syncer   syncer
	stripes  *stripes
	dataSync groupSync
}

// replaced is a slot a Write of generation gen replaced: free once a sync
// point covers gen.
type replaced struct {
	at  loc
	gen uint64
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, o Options) (*Backend, error) {
	fs := o.FS
	if fs == nil {
		fs = vfs.Default
	}
	if o.ReadOnly {
		if _, err := fs.Stat(filepath.Join(dir, syncedFile)); err != nil {
			return nil, fmt.Errorf("slots: open %s: %w", dir, err)
		}
	} else if err := makeDir(fs, dir); err != nil {
		return nil, fmt.Errorf("slots: open %s: %w", dir, err)
	}
	lock, err := fs.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, lockError(dir, err)
	}
	b := &Backend{dir: dir, fs: fs, lock: lock, idx: newIndex(), stripes: newStripes(), readOnly: o.ReadOnly,
		inflight: map[uint64]struct{}{}, synced: time.Now()}
	b.finished.L = &b.commitMu
	b.deferred.Store(o.NoSync)
	if err := b.load(); err != nil {
		b.closeFiles()
		return nil, fmt.Errorf("slots: open %s: %w", dir, err)
	}
	b.startSyncer()
	return b, nil
}

// makeDir creates dir if need be, durably: its parent is synced, so a
// crash cannot lose the directory with everything synced inside it.
func makeDir(fs vfs.FS, dir string) error {
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return syncDir(fs, filepath.Dir(dir))
}

// lockError explains why the directory's lock was refused: another
// process (or another Backend in this process) holds it.
func lockError(dir string, err error) error {
	return fmt.Errorf("slots: open %s: the directory is locked (is another oblivkv running on it?): %w", dir, err)
}

// enter holds the backend open for one call, or returns why it cannot.
func (b *Backend) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.life.RLock()
	if b.closed {
		b.life.RUnlock()
		return backend.ErrClosed
	}
	return nil
}

// enterWrite is enter for a call that writes.
func (b *Backend) enterWrite(ctx context.Context) error {
	if b.readOnly {
		return ErrReadOnly
	}
	return b.enter(ctx)
}

// Read implements backend.Backend: every address's stripe is read-locked
// for the whole call, so no Write is seen in part.
func (b *Backend) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if err := b.enter(ctx); err != nil {
		return nil, err
	}
	defer b.life.RUnlock()
	set := b.stripes.of(addrs)
	b.stripes.rlock(set)
	defer b.stripes.runlock(set)
	return b.read(addrs)
}

// read reads addrs; the caller holds their stripes. A value found in the
// index cannot move before its slot is read: only a call holding its
// stripe for writing moves it.
func (b *Backend) read(addrs []string) ([][]byte, error) {
	entries := make([]entry, len(addrs))
	b.mu.RLock()
	for i, a := range addrs {
		entries[i], _ = b.idx.get(a)
	}
	b.mu.RUnlock()
	out := make([][]byte, len(addrs))
	for i, e := range entries {
		if e.tomb || !e.at.valid() {
			continue
		}
		v, ok, err := b.cs.read(e.at, addrs[i])
		if err != nil {
			return nil, fmt.Errorf("slots: read: %w", err)
		}
		if !ok {
			return nil, ErrCorrupt
		}
		out[i] = v
	}
	return out, nil
}

// WriteVersioned implements backend.Backend: with the items' stripes
// write-locked, the stored versions are read and the newer items written;
// the directory's lock keeps other processes out, so the compare and the
// write are one step.
func (b *Backend) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	if err := backend.CheckVersions(items); err != nil {
		return 0, err
	}
	if err := b.enterWrite(ctx); err != nil {
		return 0, err
	}
	defer b.life.RUnlock()
	addrs := make([]string, len(items))
	for i, it := range items {
		addrs[i] = it.Addr
	}
	var stale int
	err := b.locked(addrs, func() (uint64, error) {
		out, n, err := backend.ApplyVersioned(items, func(addr string) (uint64, error) {
			v, err := b.read([]string{addr})
			if err != nil {
				return 0, err
			}
			return backend.StoredVersion(v[0]), nil
		})
		if err != nil {
			return 0, err
		}
		stale = n
		return b.write(lastWins(out), nil)
	})
	if err != nil {
		return 0, fmt.Errorf("slots: versioned write: %w", err)
	}
	return stale, nil
}

// WriteFenced implements backend.Backend: with the stripes of the items
// and of the fence's key write-locked, the stored token is read, then the
// items and the new token written as one batch. Plain Writes never write
// a fence's key.
func (b *Backend) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if f.Unfenced() {
		return b.Write(ctx, items)
	}
	if err := backend.CheckFence(f, items); err != nil {
		return err
	}
	if err := b.enterWrite(ctx); err != nil {
		return err
	}
	defer b.life.RUnlock()
	items = lastWins(backend.FencedItems(f, items))
	return b.locked(addrsOf(items), func() (uint64, error) {
		v, err := b.read([]string{f.Key})
		if err != nil {
			return 0, fmt.Errorf("slots: fence: %w", err)
		}
		if err := backend.Admit(f, v[0]); err != nil {
			return 0, err
		}
		gen, err := b.write(items, nil)
		if err != nil {
			return 0, fmt.Errorf("slots: fenced write: %w", err)
		}
		return gen, nil
	})
}

// Scan implements backend.Backend. It collects the addresses first and
// calls fn without holding the backend, so fn may call any method.
func (b *Backend) Scan(ctx context.Context, prefix string, fn func(addr string) error) error {
	if err := b.enter(ctx); err != nil {
		return err
	}
	b.mu.RLock()
	var addrs []string
	p := []byte(prefix)
	b.idx.each(func(a []byte, e entry) {
		if !e.tomb && bytes.HasPrefix(a, p) {
			addrs = append(addrs, string(a))
		}
	})
	b.mu.RUnlock()
	b.life.RUnlock()
	for _, a := range addrs {
		if err := fn(a); err != nil {
			return err
		}
	}
	return nil
}

// Close implements backend.Backend. It waits for calls in flight and
// makes everything durable. Closing twice returns nil.
func (b *Backend) Close() error {
	first, err := b.close()
	if first {
		b.syncer.stop()
	}
	return err
}

// close closes the files, reporting whether this was the first close.
func (b *Backend) close() (first bool, err error) {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return false, nil
	}
	b.closed = true
	if !b.readOnly {
		err = b.sync()
	}
	if cerr := b.closeFiles(); err == nil {
		err = cerr
	}
	if err != nil {
		return true, fmt.Errorf("slots: close %s: %w", b.dir, err)
	}
	return true, nil
}

func (b *Backend) closeFiles() error {
	var errs []error
	if b.cs != nil {
		errs = append(errs, b.cs.close())
	}
	if b.marker != nil {
		errs = append(errs, b.marker.f.Close())
	}
	return errors.Join(append(errs, b.lock.Close())...)
}

var _ backend.Backend = (*Backend)(nil)
