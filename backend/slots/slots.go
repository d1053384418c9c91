// Package slots is an embedded on-disk backend.Backend that keeps each
// value in a slot of a file of equal-sized slots, found through an index
// held in memory and made durable in a small pebble database. It is the
// disk backend's default engine.
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
// What it owns: one directory holding the index (a pebble database, whose
// LOCK file keeps a second process out) and one file of slots per slot
// size (slotSize). Values of up to inlineMax bytes live in the index
// itself.
//
// Atomicity: every call holds the stripes of its addresses (stripes), so
// a Read sees all of a Write or none of it. A value never overwrites a
// slot the durable index may name: it goes to a free slot, the in-memory
// index takes the whole batch at once, and a slot it replaced is reused
// only once the index on disk no longer names it. When the index reaches
// disk depends on the mode:
//   - By default each Write's slots are fsynced, then its index entries
//     committed and fsynced, before it returns (concurrent callers share
//     both fsyncs).
//   - Under Options.NoSync or DeferSync the index on disk changes only at
//     a sync point: Sync (the journal's checkpoints), Close, or a Write
//     once syncInterval has passed or enough changes or freed slots wait.
//     A sync point fsyncs the slots, then commits every entry changed
//     since the last one as one fsynced pebble batch. After a crash the
//     store is exactly as it was at its last sync point: a prefix of the
//     Writes, whole, which a journaled store's recovery relies on (it
//     redoes the Writes after it).
//
// It must never log or inspect values or addresses, never split a batch,
// never hand callers memory it still owns, and never reuse a slot that
// the index on disk may still name.
package slots

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
)

// ErrCorrupt reports a value whose slot fails its checksum: storage
// changed under the backend.
var ErrCorrupt = errors.New("slots: a value fails its checksum (the slot file was changed or damaged)")

// The triggers of a sync point under NoSync or DeferSync, besides Sync:
// a Write makes one once syncInterval has passed since the last, or once
// maxPending replaced slots (the space they hold) or maxDirty changed
// index entries (what a crash would lose) wait.
const (
	syncInterval = time.Second
	maxPending   = 1 << 16
	maxDirty     = 1 << 16
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
	deferred atomic.Bool // the index reaches disk at sync points only: Options.NoSync or DeferSync

	life     sync.RWMutex // read-held by every call, write-held by Close and Checkpoint
	closed   bool
	readOnly bool

	mu  sync.RWMutex // the in-memory index: read-held to look up, write-held to change it
	idx *index

	db *pebble.DB // the index, durably
	cs *classes

	commitMu sync.Mutex          // orders index changes with sync points
	dirty    map[string]struct{} // addresses changed since the last sync point (deferred)
	pending  []loc               // slots replaced since then: reusable once it is passed
	synced   time.Time           // when the last sync point began

	syncMu   sync.Mutex // one sync point at a time
	syncer   syncer
	stripes  *stripes
	dataSync groupSync
	counters counters
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, o Options) (*Backend, error) {
	fs := o.FS
	if fs == nil {
		fs = vfs.Default
	}
	if o.ReadOnly {
		if _, err := fs.Stat(filepath.Join(dir, "index")); err != nil {
			return nil, fmt.Errorf("slots: open %s: %w", dir, err)
		}
	} else if err := makeDir(fs, dir); err != nil {
		return nil, fmt.Errorf("slots: open %s: %w", dir, err)
	}
	db, err := pebble.Open(filepath.Join(dir, "index"), indexOptions(fs, o.ReadOnly))
	if err != nil {
		return nil, openError(dir, err)
	}
	b := &Backend{dir: dir, fs: fs, db: db, idx: newIndex(), stripes: newStripes(), readOnly: o.ReadOnly,
		dirty: map[string]struct{}{}, synced: time.Now()}
	b.deferred.Store(o.NoSync)
	if err := b.load(); err != nil {
		b.closeFiles()
		return nil, fmt.Errorf("slots: open %s: %w", dir, err)
	}
	b.startSyncer()
	return b, nil
}

// indexOptions are the index database's: entries of about twenty bytes,
// rewritten at every write of their address and read only at open. A
// memtable of indexMemTable absorbs the rewrites (a flush writes each
// address once), and entries are stored uncompressed.
func indexOptions(fs vfs.FS, readOnly bool) *pebble.Options {
	return &pebble.Options{
		FS:           fs,
		Logger:       disk.QuietLogger{},
		MemTableSize: indexMemTable,
		Levels:       []pebble.LevelOptions{{Compression: pebble.NoCompression}},
		ReadOnly:     readOnly,
	}
}

// indexMemTable is the index's pebble memtable (pebble keeps up to two).
const indexMemTable = 64 << 20

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

// openError explains the common reason Open fails: another process holds
// the directory's lock.
func openError(dir string, err error) error {
	if strings.Contains(err.Error(), "lock") {
		return fmt.Errorf("slots: open %s: the directory is locked (is another oblivkv running on it?): %w", dir, err)
	}
	return fmt.Errorf("slots: open %s: %w", dir, err)
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
	vals := make([]value, len(addrs))
	b.mu.RLock()
	for i, a := range addrs {
		vals[i], _ = b.idx.get(a)
	}
	b.mu.RUnlock()
	out := make([][]byte, len(addrs))
	for i, v := range vals {
		switch {
		case v.inline != nil:
			out[i] = append([]byte{}, v.inline...)
		case v.at.valid():
			got, ok, err := b.cs.read(v.at, addrs[i])
			if err != nil {
				return nil, fmt.Errorf("slots: read: %w", err)
			}
			if !ok {
				return nil, ErrCorrupt
			}
			out[i] = got
		}
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
	set := b.stripes.of(addrs)
	b.stripes.lock(set)
	defer b.stripes.unlock(set)
	out, stale, err := backend.ApplyVersioned(items, func(addr string) (uint64, error) {
		v, err := b.read([]string{addr})
		if err != nil {
			return 0, err
		}
		return backend.StoredVersion(v[0]), nil
	})
	if err == nil {
		err = b.write(lastWins(out))
	}
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
	set := b.stripes.of(addrsOf(items))
	b.stripes.lock(set)
	defer b.stripes.unlock(set)
	v, err := b.read([]string{f.Key})
	if err != nil {
		return fmt.Errorf("slots: fence: %w", err)
	}
	stored, err := backend.StoredToken(v[0])
	if err != nil {
		return err
	}
	if f.Token < stored {
		return backend.Refused(f, stored)
	}
	if err := b.write(items); err != nil {
		return fmt.Errorf("slots: fenced write: %w", err)
	}
	return nil
}

// Scan implements backend.Backend. It collects the addresses first and
// calls fn without holding the backend, so fn may call any method.
func (b *Backend) Scan(ctx context.Context, prefix string, fn func(addr string) error) error {
	if err := b.enter(ctx); err != nil {
		return err
	}
	b.mu.RLock()
	var addrs []string
	b.idx.each(func(a string, _ value) {
		if strings.HasPrefix(a, prefix) {
			addrs = append(addrs, a)
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
	err := b.close()
	if err != errClosedBefore {
		b.syncer.stop()
		return err
	}
	return nil
}

// errClosedBefore is close's answer to a second Close.
var errClosedBefore = errors.New("closed before")

func (b *Backend) close() error {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return errClosedBefore
	}
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	if b.readOnly {
		return b.closeFiles()
	}
	err := b.sync()
	if cerr := b.closeFiles(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("slots: close %s: %w", b.dir, err)
	}
	return nil
}

func (b *Backend) closeFiles() error {
	err := b.db.Close()
	if b.cs != nil {
		if cerr := b.cs.close(); err == nil {
			err = cerr
		}
	}
	return err
}

var _ backend.Backend = (*Backend)(nil)
