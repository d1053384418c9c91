// Package disk is the embedded on-disk backend.Backend, built on pebble. It
// is the default backend: one process, one data directory, no server to run.
//
// It owns one pebble database in a directory and the lock on that directory
// (pebble's LOCK file, so a second process opening the same directory gets
// a clear error instead of corrupting it). Every Write and Delete is one
// pebble batch, so it is applied atomically; every multi-address Read runs
// against one pebble snapshot, so it never observes half of a batch. The
// conditional writes (WriteVersioned, WriteFenced) read what they compare
// and commit their batch under one mutex: the directory's lock keeps every
// other process out, so that makes the check and the write one step.
//
// It must never log, print or inspect values or addresses (pebble's own
// logger is replaced by a quiet one, so nothing reaches stdout), never
// split a batch, and never hand callers memory that pebble still owns.
//
// Durability: by default every Write and Delete is committed with
// pebble.Sync, so a call that returned nil survives kill -9 and power loss;
// pebble groups the fsyncs of concurrent commits, so many concurrent
// callers share one fsync. Options.NoSync trades that for speed (benchmarks,
// scratch stores): acknowledged writes may then be lost on a crash, but a
// clean Close still makes everything durable, because closing pebble syncs
// its write-ahead log.
//
// Why pebble: it is a pure-Go LSM store (no cgo), maintained by Cockroach
// Labs, with atomic batches, snapshots, group commit and prefix iteration,
// which is exactly this interface. Measured against go.etcd.io/bbolt on this
// workload (random 1 KiB blocks, batches of 64 writes and 20 reads), pebble
// wrote durable batches 3-40x faster and read 2-3x slower; protocols write
// about as much as they read, so pebble stays (docs/dependencies.md,
// "Embedded backend: pebble"; BenchmarkDiskEngines reproduces it).
package disk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/oblivkv/oblivkv/backend"
)

// scanChunk is how many addresses Scan reads from pebble before it releases
// the database and hands them to the caller's function.
const scanChunk = 1024

// DefaultCacheSize is the block cache used when Options.CacheSize is 0.
// It is memory outside the Go heap, taken as blocks are read: a store
// smaller than it never fills it. A 2^16 x 1 KiB treebeard store holds
// about 300 MB; with 64 MiB of cache most reads went to the OS page cache
// through a pread each, and 512 MiB made treebeard 1.3x faster on disk
// at 256 clients (docs/dependencies.md).
const DefaultCacheSize = 512 << 20

// DefaultMemTableSize is pebble's memtable when Options.MemTableSize is
// 0 (pebble keeps up to two, allocated as written). The tree protocols
// overwrite the same upper buckets again and again; a large memtable
// absorbs those overwrites before they reach the LSM: pebble's own 4 MiB
// flushed them into compactions that took 40% of the CPU, and 128 MiB ran
// treebeard 1.3x faster than 32 MiB at 256 clients (docs/dependencies.md).
const DefaultMemTableSize = 128 << 20

// The LSM's shape, for stores that rewrite random addresses all the time
// (every protocol's storage): level 0 is compacted once it holds
// l0CompactionThreshold tables instead of pebble's 4, and the levels
// below start at lBaseMaxBytes instead of 64 MiB, so each compaction
// merges more overwrites of the same addresses and fewer run in all;
// writes stop only at l0StopWritesThreshold tables (pebble's 12) so a
// burst does not stall while level 0 is compacted. Together they made
// treebeard on disk 1.1x faster again (docs/dependencies.md).
const (
	l0CompactionThreshold = 8
	l0StopWritesThreshold = 32
	lBaseMaxBytes         = 512 << 20
)

// compactionConcurrency is how many compactions may run at once
// (pebble's default is 1). Under a steady stream of random overwrites
// level 0 falls behind with one: a 2^16-key treebeard store served at 256
// clients held 155 level-0 files. Two made it 4-7% faster with a lower
// p99 on this 2-core machine (docs/dependencies.md).
const compactionConcurrency = 2

// levels are the options of every level of the LSM tree. Values arrive
// sealed, so compressing them is CPU spent for nothing: they are stored
// as they come (NoCompression; pebble takes a zero Compression for
// Snappy). A bloom filter per table (10 bits per key, about 1% false
// positives) lets a point read skip the tables of every level that do not
// hold its address instead of reading one of their blocks. Blocks of
// 32 KiB instead of pebble's 4 KiB: flushes and compactions write a
// table in fewer, larger writes with a smaller index, which took
// treebeard on disk from 3,539 to 4,027 ops/s on average over five
// alternated pairs (docs/dependencies.md); a block read that misses the
// cache reads 32 KiB instead of 4. Tables of 16 MiB at level 0 (doubling
// at each level below, as pebble does from its 2 MiB): a flush of a
// 128 MiB memtable makes 8 tables instead of 64, and compactions handle
// fewer, larger files; 4,470 ops/s against 3,913 over six alternated
// pairs.
var levels = []pebble.LevelOptions{{FilterPolicy: bloom.FilterPolicy(10), Compression: pebble.NoCompression, BlockSize: 32 << 10, TargetFileSize: 16 << 20}}

// Options tune a disk backend. The zero value is the safe default.
type Options struct {
	// NoSync commits Writes and Deletes without waiting for fsync. Close
	// still makes everything durable; a crash may lose acknowledged calls.
	NoSync bool
	// CacheSize is the size in bytes of pebble's block cache (memory
	// outside the Go heap). 0 means DefaultCacheSize.
	CacheSize int64
	// MemTableSize is the size in bytes of one pebble memtable (pebble
	// keeps up to two). 0 means DefaultMemTableSize.
	MemTableSize uint64
	// ReadOnly opens an existing database without writing to it (a
	// missing one is an error); Writes and Deletes fail.
	ReadOnly bool
}

// Backend is a backend.Backend stored in a pebble database.
type Backend struct {
	dir string
	wo  atomic.Pointer[pebble.WriteOptions] // pebble.NoSync once NoSync or DeferSync

	mu sync.RWMutex // read-held by every call, write-held by Close
	db *pebble.DB   // nil once closed

	conditional sync.Mutex // serialises WriteVersioned and WriteFenced: each one's check and write are one step
	stalls      *stalls    // pebble's write stalls (Metrics)
	cacheSize   int64      // the block cache's capacity (Metrics)
}

// Open opens (creating if needed) the pebble database in dir, with fsync on
// every Write and Delete.
func Open(dir string) (*Backend, error) { return OpenWith(dir, Options{}) }

// OpenWith opens (creating if needed, unless o.ReadOnly) the pebble
// database in dir.
func OpenWith(dir string, o Options) (*Backend, error) {
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	cache := pebble.NewCache(o.CacheSize)
	defer cache.Unref() // the database holds its own reference
	st := &stalls{}
	events := st.listener()
	db, err := pebble.Open(dir, &pebble.Options{
		Logger:                   QuietLogger{},
		Cache:                    cache,
		MemTableSize:             o.MemTableSize,
		L0CompactionThreshold:    l0CompactionThreshold,
		L0StopWritesThreshold:    l0StopWritesThreshold,
		LBaseMaxBytes:            lBaseMaxBytes,
		MaxConcurrentCompactions: func() int { return compactionConcurrency },
		Levels:                   levels,
		EventListener:            &events,
		ReadOnly:                 o.ReadOnly,
		ErrorIfNotExists:         o.ReadOnly,
	})
	if err != nil {
		return nil, openError(dir, err)
	}
	wo := pebble.Sync
	if o.NoSync {
		wo = pebble.NoSync
	}
	b := &Backend{dir: dir, db: db, stalls: st, cacheSize: o.CacheSize}
	b.wo.Store(wo)
	return b, nil
}

// openError explains the common reason Open fails: another process (or
// another Backend in this process) holds the directory's lock.
func openError(dir string, err error) error {
	switch {
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES):
		return fmt.Errorf("disk: open %s: the directory is locked by another process (is another oblivkv running on it?): %w", dir, err)
	case strings.Contains(err.Error(), "lock held by current process"):
		return fmt.Errorf("disk: open %s: the directory is already open in this process: %w", dir, err)
	}
	return fmt.Errorf("disk: open %s: %w", dir, err)
}

// acquire returns the open database with the read lock held, or ErrClosed.
func (b *Backend) acquire(ctx context.Context) (*pebble.DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.RLock()
	if b.db == nil {
		b.mu.RUnlock()
		return nil, backend.ErrClosed
	}
	return b.db, nil
}

// Read implements backend.Backend: one snapshot, one Get per address.
func (b *Backend) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	db, err := b.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer b.mu.RUnlock()
	var r pebble.Reader = db
	if len(addrs) > 1 {
		snap := db.NewSnapshot()
		defer snap.Close()
		r = snap
	}
	out := make([][]byte, len(addrs))
	for i, a := range addrs {
		if out[i], err = get(r, a); err != nil {
			return nil, fmt.Errorf("disk: read: %w", err)
		}
	}
	return out, nil
}

// get returns a copy of the value at addr, nil if it is missing, and a
// non-nil empty slice for an empty value.
func get(r pebble.Reader, addr string) ([]byte, error) {
	v, closer, err := r.Get(bytesOf(addr))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append(make([]byte, 0, len(v)), v...), nil
}

// Write implements backend.Backend: one pebble batch.
func (b *Backend) Write(ctx context.Context, items []backend.Item) error {
	return b.commit(ctx, len(items), func(batch *pebble.Batch) error {
		for _, it := range items {
			if err := batch.Set(bytesOf(it.Addr), it.Value, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// WriteVersioned implements backend.Backend: the stored versions are read
// and the newer items written in one pebble batch, with other versioned
// writes held off, so the compare and the set are one atomic step.
func (b *Backend) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	if err := backend.CheckVersions(items); err != nil {
		return 0, err
	}
	db, err := b.acquire(ctx)
	if err != nil {
		return 0, err
	}
	b.conditional.Lock()
	out, stale, err := backend.ApplyVersioned(items, func(addr string) (uint64, error) {
		v, err := get(db, addr)
		return backend.StoredVersion(v), err
	})
	b.mu.RUnlock()
	if err == nil {
		err = b.Write(ctx, out)
	}
	b.conditional.Unlock()
	if err != nil {
		return 0, fmt.Errorf("disk: versioned write: %w", err)
	}
	return stale, nil
}

// WriteFenced implements backend.Backend: the stored token is read, then
// the items and the new token are committed as one pebble batch, while
// every other conditional write waits. A mutex is enough to make the
// check and the commit one atomic step because the directory's lock keeps
// every other process out of the database, and plain Writes never write a
// fence's key.
func (b *Backend) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if f.Unfenced() {
		return b.Write(ctx, items)
	}
	if err := backend.CheckFence(f, items); err != nil {
		return err
	}
	b.conditional.Lock()
	defer b.conditional.Unlock()
	if err := b.checkToken(ctx, f); err != nil {
		return err
	}
	if err := b.Write(ctx, backend.FencedItems(f, items)); err != nil {
		return fmt.Errorf("disk: fenced write: %w", err)
	}
	return nil
}

// checkToken returns the refusal of a write with f if the database holds
// a higher token at f.Key.
func (b *Backend) checkToken(ctx context.Context, f backend.Fence) error {
	db, err := b.acquire(ctx)
	if err != nil {
		return err
	}
	v, err := get(db, f.Key)
	b.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("disk: fence: %w", err)
	}
	return backend.Admit(f, v)
}

// Delete implements backend.Backend: one pebble batch.
func (b *Backend) Delete(ctx context.Context, addrs []string) error {
	return b.commit(ctx, len(addrs), func(batch *pebble.Batch) error {
		for _, a := range addrs {
			if err := batch.Delete(bytesOf(a), nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// commit fills one batch with fill and commits it; n == 0 is a no-op.
func (b *Backend) commit(ctx context.Context, n int, fill func(*pebble.Batch) error) error {
	db, err := b.acquire(ctx)
	if err != nil {
		return err
	}
	defer b.mu.RUnlock()
	if n == 0 {
		return nil
	}
	batch := db.NewBatch()
	defer batch.Close()
	if err := fill(batch); err != nil {
		return fmt.Errorf("disk: batch: %w", err)
	}
	if err := batch.Commit(b.wo.Load()); err != nil {
		return fmt.Errorf("disk: commit: %w", err)
	}
	return nil
}

// Sync makes every Write and Delete that returned durable
// (backend.Syncer): one fsync of pebble's write-ahead log, which matters
// under Options.NoSync.
func (b *Backend) Sync(ctx context.Context) error {
	db, err := b.acquire(ctx)
	if err != nil {
		return err
	}
	defer b.mu.RUnlock()
	return db.LogData(nil, pebble.Sync)
}

// Checkpoint writes a consistent copy of the database into dir, which
// must not exist: hard links to its tables, which pebble never changes,
// and copies of its manifest and log, so it takes little time and space
// whatever the database's size. A database opened ReadOnly cannot be
// checkpointed.
func (b *Backend) Checkpoint(ctx context.Context, dir string) error {
	db, err := b.acquire(ctx)
	if err != nil {
		return err
	}
	defer b.mu.RUnlock()
	if err := db.Checkpoint(dir); err != nil {
		return fmt.Errorf("disk: checkpoint: %w", err)
	}
	return nil
}

// DeferSync makes Writes and Deletes return once pebble has them, without
// an fsync of their own (backend.SyncDeferrer): a caller that journals
// every write it issues makes them durable with Sync at its checkpoints.
func (b *Backend) DeferSync() bool {
	b.wo.Store(pebble.NoSync)
	return true
}

// Scan implements backend.Backend. It reads addresses in chunks and calls fn
// without holding the database, so fn may call any method, even Close.
func (b *Backend) Scan(ctx context.Context, prefix string, fn func(addr string) error) error {
	lower, upper := []byte(prefix), prefixEnd([]byte(prefix))
	for {
		addrs, err := b.scanChunk(ctx, lower, upper)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if err := fn(a); err != nil {
				return err
			}
		}
		if len(addrs) < scanChunk {
			return nil
		}
		lower = append([]byte(addrs[len(addrs)-1]), 0) // the next key after the last
	}
}

// scanChunk returns up to scanChunk addresses in [lower, upper).
func (b *Backend) scanChunk(ctx context.Context, lower, upper []byte) ([]string, error) {
	db, err := b.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer b.mu.RUnlock()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("disk: scan: %w", err)
	}
	var addrs []string
	for ok := it.First(); ok && len(addrs) < scanChunk; ok = it.Next() {
		addrs = append(addrs, string(it.Key()))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("disk: scan: %w", err)
	}
	return addrs, nil
}

// prefixEnd returns the smallest key greater than every key starting with
// prefix, or nil (no upper bound) if there is none.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Close implements backend.Backend. It waits for calls in flight, then
// closes pebble, which syncs its write-ahead log. Closing twice returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.db == nil {
		return nil
	}
	db := b.db
	b.db = nil
	if err := db.Close(); err != nil {
		return fmt.Errorf("disk: close %s: %w", b.dir, err)
	}
	return nil
}

// bytesOf views s as a byte slice without copying. It is only passed to
// pebble calls that neither keep nor modify their key argument (Get, and
// Batch.Set/Delete, which copy it into the batch).
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// QuietLogger keeps pebble's informational messages off stdout and
// stderr, for every pebble database of the project (this backend's, the
// raft log store's); they are available at slog's debug level. A fatal
// error in pebble is a corrupt or unusable store, so it panics with
// pebble's message.
type QuietLogger struct{}

func (QuietLogger) Infof(format string, args ...any) {
	slog.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (QuietLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	slog.Error(msg)
	panic(msg)
}

var _ backend.Backend = (*Backend)(nil)
