// Package slots is an embedded on-disk backend.Backend that keeps each
// value in a slot of a file of equal-sized slots, found through an index
// held in memory and made durable in a small pebble database. It is the
// disk backend's default engine.
//
// Every protocol stores sealed blocks of a few fixed sizes at a fixed set
// of addresses and rewrites them again and again. An LSM store (package
// disk, over pebble) pays for that with point reads across its levels and
// with compactions that merge the overwrites; here a read is a lookup in
// memory and one pread, and a journaled store's write one pwrite over the
// address's own slot. No maintained Go library stores values this way
// behind atomic multi-address batches, which is why it is written here
// (docs/dependencies.md, "Slot storage").
//
// What it owns: one directory holding the index (a pebble database, whose
// LOCK file keeps a second process out), one file of slots per slot size
// (slotSize), and a marker of a clean close. Values of up to inlineMax
// bytes live in the index itself.
//
// Atomicity: every call holds the stripes of its addresses (stripes), so
// a Read sees all of a Write or none of it. A value goes to a free slot,
// and one index commit for the whole batch makes it the address's; a
// slot the commit replaced is reused only once the commit is durable:
//   - By default the slots are fsynced before the index commit and the
//     commit is fsynced before Write returns (concurrent callers share
//     both fsyncs), so the durable index only ever names durable slots.
//   - Under Options.NoSync neither is fsynced per write; Sync (or this
//     package, once enough freed slots wait) syncs both. Until then an
//     entry also names its base, the address's last synced value, which
//     stays untouched. An open after an unclean close checks every
//     entry's slot (its checksum and the stamp the entry holds) and falls
//     back to the base where a crash tore it, or drops an address that
//     had no synced value.
//   - Under DeferSync the caller journals every write and redoes, after a
//     crash, every write since its last Sync (internal/durable). A value
//     whose address already has a slot of its size then overwrites that
//     slot in place, with no index commit; a torn slot is rewritten by
//     the redo, as is the rest of a batch a crash cut short.
//
// It must never log or inspect values or addresses, never split a batch,
// never hand callers memory it still owns, and never reuse a slot that a
// durable index entry may still name.
package slots

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
)

// ErrCorrupt reports a value whose slot fails its checksum: storage
// changed under the backend.
var ErrCorrupt = errors.New("slots: a value fails its checksum (the slot file was changed or damaged)")

// maxPending is how many freed slots may wait for a sync before a write
// syncs (under NoSync or DeferSync), which bounds the space they hold.
const maxPending = 1 << 16

// cleanMarker names the file that records a clean close.
const cleanMarker = "CLEAN"

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
	deferred atomic.Bool // no fsync per write: Options.NoSync or DeferSync
	inPlace  atomic.Bool // DeferSync: the caller redoes every write since the last Sync

	life     sync.RWMutex // read-held by every call, write-held by Close and Checkpoint
	closed   bool
	readOnly bool

	mu  sync.RWMutex // the in-memory index: read-held to look up, write-held to change it
	idx *index

	db *pebble.DB // the index, durably
	cs *classes

	commitMu sync.Mutex // orders index commits with their swaps, and sync epochs
	epoch    uint64     // the current sync epoch, from 1
	pending  []loc      // slots freed this epoch: reusable once it is synced
	based    []string   // addresses given a base this epoch

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
	b := &Backend{dir: dir, fs: fs, db: db, idx: newIndex(), epoch: 1, stripes: newStripes(), readOnly: o.ReadOnly}
	b.deferred.Store(o.NoSync)
	if err := b.load(); err != nil {
		b.closeFiles()
		return nil, fmt.Errorf("slots: open %s: %w", dir, err)
	}
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

// read reads addrs; the caller holds their stripes. An entry read here
// cannot change before its slot is read: only a call holding its stripe
// for writing changes it.
func (b *Backend) read(addrs []string) ([][]byte, error) {
	entries := make([]entry, len(addrs))
	b.mu.RLock()
	for i, a := range addrs {
		entries[i], _ = b.idx.get(a)
	}
	b.mu.RUnlock()
	out := make([][]byte, len(addrs))
	for i, e := range entries {
		switch {
		case e.cur.inline != nil:
			out[i] = append([]byte{}, e.cur.inline...)
		case e.cur.at.valid():
			v, ok, err := b.cs.read(e.cur.at, addrs[i])
			if err != nil {
				return nil, fmt.Errorf("slots: read: %w", err)
			}
			if !ok {
				return nil, ErrCorrupt
			}
			out[i] = v
		}
	}
	return out, nil
}

// change is one address's new entry, nil for a Delete.
type change struct {
	addr string
	e    *entry
}

// Write implements backend.Backend: the values go to free slots, then one
// index commit makes the whole batch visible. Under DeferSync a value
// that fits its address's slot overwrites it instead, with no index
// commit. The batch's stripes are write-locked for the whole call.
func (b *Backend) Write(ctx context.Context, items []backend.Item) error {
	if err := b.enterWrite(ctx); err != nil {
		return err
	}
	defer b.life.RUnlock()
	items = lastWins(items)
	set := b.stripes.of(addrsOf(items))
	b.stripes.lock(set)
	defer b.stripes.unlock(set)
	return b.write(items)
}

// write writes items, distinct addresses whose stripes the caller holds.
func (b *Backend) write(items []backend.Item) error {
	if b.inPlace.Load() {
		return b.writeInPlace(items)
	}
	changes, err := b.place(items)
	if err != nil {
		return fmt.Errorf("slots: write: %w", err)
	}
	return b.commit(changes)
}

func addrsOf(items []backend.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Addr
	}
	return out
}

// lastWins drops every item a later item of the batch overwrites.
func lastWins(items []backend.Item) []backend.Item {
	seen := make(map[string]bool, len(items))
	out := make([]backend.Item, 0, len(items))
	for i := len(items) - 1; i >= 0; i-- {
		if !seen[items[i].Addr] {
			seen[items[i].Addr] = true
			out = append(out, items[i])
		}
	}
	return out
}

// place writes each value that does not fit the index to a free slot.
func (b *Backend) place(items []backend.Item) ([]change, error) {
	changes := make([]change, 0, len(items))
	for _, it := range items {
		e, err := b.store(it)
		if err != nil {
			b.release(newSlots(changes))
			return nil, err
		}
		changes = append(changes, change{it.Addr, e})
	}
	return changes, nil
}

func (b *Backend) store(it backend.Item) (*entry, error) {
	if len(it.Value) <= inlineMax {
		return &entry{cur: value{inline: append([]byte{}, it.Value...)}}, nil
	}
	c, err := b.cs.of(slotSize(len(it.Value)))
	if err != nil {
		return nil, err
	}
	slot, err := c.take()
	if err != nil {
		return nil, err
	}
	l := loc{class: c.id, slot: slot, stamp: rand.Uint64()}
	if err := b.cs.write(l, it.Addr, it.Value); err != nil {
		c.release(l.slot)
		return nil, err
	}
	return &entry{cur: value{at: l}}, nil
}

// newSlots returns the slots changes put values in.
func newSlots(changes []change) []loc {
	var out []loc
	for _, ch := range changes {
		if ch.e != nil && ch.e.cur.at.valid() {
			out = append(out, ch.e.cur.at)
		}
	}
	return out
}

// commit makes changes durable (or, deferred, ordered before the next
// sync) and visible as one step.
func (b *Backend) commit(changes []change) error {
	deferred := b.deferred.Load()
	if !deferred && len(newSlots(changes)) > 0 {
		if err := b.dataSync.do(b.cs.syncAll); err != nil {
			return fmt.Errorf("slots: sync: %w", err)
		}
	}
	freed, err := b.apply(changes, deferred)
	if err != nil {
		return fmt.Errorf("slots: commit: %w", err)
	}
	if deferred {
		return b.syncIfPendingFull()
	}
	if err := b.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("slots: commit: %w", err)
	}
	b.release(freed)
	return nil
}

// apply commits changes to the index and swaps them into memory, in the
// order of every other commit. It returns the slots they replaced that
// the caller frees once the commit is durable (deferred: none, they wait
// for the epoch's sync).
func (b *Backend) apply(changes []change, deferred bool) ([]loc, error) {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	freed, based, err := b.commitIndex(changes, deferred)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.swap(changes)
	b.mu.Unlock()
	return b.settle(freed, based, deferred), nil
}

// writeInPlace is write under DeferSync: a value whose address has a slot
// of its size overwrites it; the others go through the index as write's
// do. That a crash may tear an overwritten slot is the journal's to redo
// (backend.SyncDeferrer), as is the rest of a batch a crash cut short.
func (b *Backend) writeInPlace(items []backend.Item) error {
	var fresh []backend.Item
	b.mu.RLock()
	at := make([]loc, len(items))
	for i, it := range items {
		if e, ok := b.idx.get(it.Addr); ok && e.cur.at.valid() && len(it.Value) > inlineMax && slotSize(len(it.Value)) == b.cs.get(e.cur.at.class).size {
			at[i] = e.cur.at
		} else {
			fresh = append(fresh, it)
		}
	}
	b.mu.RUnlock()
	for i, it := range items {
		if at[i].valid() {
			if err := b.cs.write(at[i], it.Addr, it.Value); err != nil {
				return fmt.Errorf("slots: write: %w", err)
			}
			b.counters.inPlaceWrites.Add(1)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	changes, err := b.place(fresh)
	if err != nil {
		return fmt.Errorf("slots: write: %w", err)
	}
	if _, err := b.apply(changes, true); err != nil {
		return fmt.Errorf("slots: commit: %w", err)
	}
	return b.syncIfPendingFull()
}

// commitIndex sets each change's base and commits the changes to the
// index, returning the slots they replaced and the addresses given a
// base (displace). On failure the changes' new slots are freed. The
// caller holds commitMu.
func (b *Backend) commitIndex(changes []change, deferred bool) (freed []loc, based []string, err error) {
	if len(changes) == 0 {
		return nil, nil, nil
	}
	batch := b.db.NewBatch()
	defer batch.Close()
	for _, ch := range changes {
		f, gotBase := b.displace(ch.addr, ch.e, deferred)
		freed = append(freed, f...)
		if gotBase {
			based = append(based, ch.addr)
		}
		if ch.e == nil {
			err = batch.Delete([]byte(ch.addr), nil)
		} else {
			err = batch.Set([]byte(ch.addr), ch.e.encode(b.cs), nil)
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = batch.Commit(pebble.NoSync)
		b.counters.indexCommits.Add(1)
	}
	if err != nil {
		b.release(newSlots(changes))
		return nil, nil, err
	}
	return freed, based, nil
}

// settle hands the slots a commit replaced to the epoch when syncs are
// deferred (returning none), else back to the caller to free once the
// commit is durable. The caller holds commitMu.
func (b *Backend) settle(freed []loc, based []string, deferred bool) []loc {
	if !deferred {
		return freed
	}
	b.pending = append(b.pending, freed...)
	b.based = append(b.based, based...)
	return nil
}

// displace sets ne's base (deferred) and returns the slots old held that
// nothing needs once ne is durable, and whether ne got a base to release
// at the epoch's sync. Under per-write syncs old is durable as a whole
// and ne needs no base. Deferred, the address's last synced value must
// outlive the epoch: it is old's current value if old was written in an
// earlier epoch, else old's base, and ne inherits it (an inline ne too,
// for the writes after it; a Delete leaves it to the epoch's pending
// slots).
func (b *Backend) displace(addr string, ne *entry, deferred bool) (freed []loc, gotBase bool) {
	if ne != nil && deferred {
		ne.epoch = b.epoch
	}
	old, ok := b.idx.get(addr)
	if !ok {
		return nil, false
	}
	if !deferred {
		return slotsOf(old.cur, old.base), false
	}
	base, replaced := old.base, old.cur
	if old.epoch < b.epoch {
		base, replaced = old.cur, old.base
	}
	if ne == nil {
		return slotsOf(base, replaced), false
	}
	ne.base = base
	return slotsOf(replaced), old.epoch < b.epoch && base.exists()
}

// slotsOf returns the slots of those of vs that are in one.
func slotsOf(vs ...value) []loc {
	var out []loc
	for _, v := range vs {
		if v.at.valid() {
			out = append(out, v.at)
		}
	}
	return out
}

// swap makes changes the in-memory index's; the caller holds mu for
// writing, so readers see all of them or none.
func (b *Backend) swap(changes []change) {
	for _, ch := range changes {
		if ch.e == nil {
			b.idx.del(ch.addr)
		} else {
			b.idx.put(ch.addr, *ch.e)
		}
	}
}

// syncIfPendingFull syncs once enough freed slots wait for a sync.
func (b *Backend) syncIfPendingFull() error {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	if len(b.pending) < maxPending {
		return nil
	}
	return b.syncLocked()
}

// release makes slots free for reuse.
func (b *Backend) release(locs []loc) { b.cs.release(locs) }

// Delete implements backend.Backend: one index commit.
func (b *Backend) Delete(ctx context.Context, addrs []string) error {
	if err := b.enterWrite(ctx); err != nil {
		return err
	}
	defer b.life.RUnlock()
	set := b.stripes.of(addrs)
	b.stripes.lock(set)
	defer b.stripes.unlock(set)
	changes := make([]change, 0, len(addrs))
	seen := map[string]bool{}
	for _, a := range addrs {
		if !seen[a] {
			seen[a] = true
			changes = append(changes, change{addr: a})
		}
	}
	return b.commit(changes)
}

// Sync makes every Write and Delete that returned durable
// (backend.Syncer), and lets the slots they replaced be reused.
func (b *Backend) Sync(ctx context.Context) error {
	if err := b.enterWrite(ctx); err != nil {
		return err
	}
	defer b.life.RUnlock()
	return b.sync()
}

// sync ends the current epoch: it syncs the slots, then the index, then
// frees the slots the epoch's commits replaced and the bases its entries
// no longer need. Writes go on while the files sync.
func (b *Backend) sync() error {
	b.commitMu.Lock()
	ep := b.endEpoch()
	b.commitMu.Unlock()
	if err := b.syncFiles(); err != nil {
		return err
	}
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	b.freeEpoch(ep)
	return nil
}

// syncLocked is sync for a caller holding commitMu.
func (b *Backend) syncLocked() error {
	ep := b.endEpoch()
	if err := b.syncFiles(); err != nil {
		return err
	}
	b.freeEpoch(ep)
	return nil
}

// ended is what an epoch leaves to free once it is synced.
type ended struct {
	epoch uint64
	freed []loc
	based []string
}

func (b *Backend) endEpoch() ended {
	ep := ended{b.epoch, b.pending, b.based}
	b.epoch, b.pending, b.based = b.epoch+1, nil, nil
	return ep
}

func (b *Backend) syncFiles() error {
	b.counters.syncs.Add(1)
	if err := b.cs.syncAll(); err != nil {
		return fmt.Errorf("slots: sync: %w", err)
	}
	if err := b.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("slots: sync: %w", err)
	}
	return nil
}

// freeEpoch frees what ep left once it is synced; the caller holds
// commitMu.
func (b *Backend) freeEpoch(ep ended) {
	b.mu.Lock()
	for _, a := range ep.based {
		if e, ok := b.idx.get(a); ok && e.epoch == ep.epoch {
			ep.freed = append(ep.freed, slotsOf(e.base)...)
			e.base = value{}
			b.idx.put(a, e)
		}
	}
	b.mu.Unlock()
	b.release(ep.freed)
}

// DeferSync stops the fsyncs of each Write and Delete
// (backend.SyncDeferrer): a caller that journals every write makes them
// durable with Sync at its checkpoints, and redoes after a crash every
// write since the last one, so Write may overwrite a slot in place.
func (b *Backend) DeferSync() bool {
	b.deferred.Store(true)
	b.inPlace.Store(true)
	return true
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
	b.idx.each(func(a string, _ entry) {
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

// Close implements backend.Backend. It waits for calls in flight, makes
// everything durable and records the clean close, so the next open need
// not check the slots. Closing twice returns nil.
func (b *Backend) Close() error {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return nil
	}
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	if b.readOnly {
		return b.closeFiles()
	}
	err := b.syncFiles()
	if cerr := b.closeFiles(); err == nil {
		err = cerr
	}
	if err == nil {
		err = markClean(b.fs, b.dir)
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
