// Package journal keeps a proxy's trusted state durable on the proxy's own
// disk: an append-only log of state transitions, and checkpoints of the
// whole state behind which the log is dropped. A store recovers by loading
// its last checkpoint and replaying the records after it.
//
// The log is a sequence of segment files in the journal directory. Each
// record belongs to one machine (durable.MachineID: a store that is one
// machine uses machine 0; treebeard's layers and oblivistore's Front and
// partition groups each have their own), has a log sequence number (LSN,
// from 1, consecutive over every machine's records) and is sealed with
// AES-GCM bound to its LSN and its machine, so records cannot be moved,
// replayed, forged or handed to another machine without the key; a
// CRC-32C over the whole record tells a torn write from a complete one.
// Commits are grouped: Commit appends and waits while one caller writes
// and syncs every record appended so far (one sync for all the callers
// waiting, never one per record). A torn or corrupt tail (a record cut
// short by a crash, or garbage after the last whole record) is passed
// over at Open: it can hold only records whose Commit never returned. A
// bad record with good ones after it is corruption of acknowledged work
// and fails Open instead.
//
// Segment files are recycled: the files of a few dropped segments wait,
// renamed free-N, to hold new segments, which are written over from the
// file's start. A commit then overwrites blocks the file system has
// allocated already and syncs with fdatasync, leaving the file's size
// and allocation, and so the file system's own journal, alone: on ext4,
// 4 KiB so written and synced take 130 to 170 µs where an append and its
// fsync take 290, and 20 KiB 220 µs where an append takes 320 to 415
// (space reserved with fallocate and never written does not help: 260
// µs). A write that grows the file makes fdatasync sync its size too, so
// a new file's appends are as durable. A segment's file may thus go on
// after its last record with a stale tail: the records of the segment
// the file held before, whose LSNs are all below the new segment's
// first, or a piece of one. That is not corruption: a segment ends at the
// record before the next segment's first, and the last segment ends at
// its first bad record with no record at or after that record's LSN
// anywhere after it, as a torn tail ends; a stale tail holds no such
// record, since LSNs only grow.
//
// Checkpoints are per machine: a machine's state as of one of its
// records, written through internal/durable/sealedstate into a pebble
// store (backend/disk) in the journal directory, in two slots per machine
// used in turn, so a crash while writing one leaves the other. Machines
// checkpoint at different positions, so the log is truncated at its
// floor: the record before the first one some machine's latest
// checkpoint does not cover (the last record, when every machine's
// checkpoint covers all of its records). A machine with no record after
// its checkpoint holds no record back. The floor is saved before the
// segments wholly at or below it are dropped, and Open checks the log
// runs unbroken from it. The same store keeps the journal's incarnation
// (durable.Journal.Incarnation), which Open grows by one and syncs before
// it returns.
//
// A journal of an earlier build (one checkpoint of the whole state, and
// records of no machine, in segments named log-N) opens as machine 0's:
// Open moves its checkpoint to machine 0's slots, its records read as
// machine 0's, and records appended go to segments of this format
// (mlog-N), which an earlier build does not read: having lost the
// checkpoint it knew, it refuses the journal as lost instead of serving
// a state without them.
//
// The package owns the journal directory and its formats; what a record or
// a checkpoint means is its caller's. It must never write anything
// unsealed, never return a record that failed to authenticate, and never
// drop a record it has reported durable. It is written here rather than
// taken from pebble's own write-ahead log because recovery must know, and
// test, exactly which records survive a torn write, and because the log
// holds each record once, where an LSM store would write it again at every
// flush and compaction.
package journal

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/internal/atomicfile"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/sealedstate"
	"github.com/oblivkv/oblivkv/seal"
)

// Options tune a journal. The zero value is the safe default.
type Options struct {
	// NoSync writes commits without syncing (the --fsync none policy): a
	// process crash loses nothing committed, since the operating system
	// holds the writes, but a power loss may lose the last moments.
	NoSync bool
}

// checkpointStore is how the journal opens its pebble database of
// checkpoints: a small block cache (a checkpoint is read once, at open)
// and a memtable of 32 MiB, not the disk backend's defaults, which are
// sized for a store's storage.
var checkpointStore = disk.Options{CacheSize: 1 << 20, MemTableSize: 32 << 20}

// readOnly returns o opening its database read-only.
func readOnly(o disk.Options) disk.Options {
	o.ReadOnly = true
	return o
}

// Stats count a journal's work since Open.
type Stats = durable.JournalStats

// Record is one record of the log.
type Record = durable.Record

// ErrCorrupt reports a journal whose acknowledged records cannot be read
// back: a bad record followed by good ones, or records missing between a
// checkpoint and the log.
var ErrCorrupt = errors.New("journal: corrupt")

// Journal is an open journal, a durable.Journal. Its methods are safe for
// concurrent use.
type Journal struct {
	dir    string
	keys   *seal.Keys
	sync   bool
	lock   *os.File      // holds the directory's lock while open
	states *disk.Backend // the checkpoint store

	mu       sync.Mutex
	done     *sync.Cond // signalled when a group commit ends
	seg      *os.File   // the segment written to
	segOff   int64      // where the next group goes in seg
	segs     []segment  // every segment file, oldest first
	free     []freeFile // dropped segments' files waiting for reuse, largest first
	pending  []byte     // encoded records appended and not yet written
	next     uint64     // LSN of the next record
	written  uint64     // highest LSN written to the file
	durable  uint64     // highest LSN synced (or written, with NoSync)
	flushing bool       // a caller is writing a group
	err      error      // a write or sync failed: the journal is unusable
	size     int64      // bytes of records since the last checkpoint
	stats    Stats

	// uncovered holds, per machine, the LSNs of its records its latest
	// checkpoint does not cover, oldest first: the floor is below the
	// first of them.
	uncovered map[durable.MachineID][]uint64

	recovered *durable.Recovery // found at Open, until Recovered hands it out

	incarnation uint64 // this open's, set by Open

	cpMu  sync.Mutex // serialises checkpoints
	cps   map[durable.MachineID]*slots
	floor uint64 // records up to it are dropped
}

// slots are a machine's two checkpoint slots.
type slots struct {
	next int    // the slot to write next (the other holds the latest)
	gen  uint64 // the latest checkpoint's generation
	at   uint64 // and its position
}

// segment is one log file: its records' LSNs start at first. A legacy
// segment is an earlier build's, whose records belong to no machine
// (machine 0's).
type segment struct {
	path   string
	first  uint64
	legacy bool
}

// freeFile is a dropped segment's file waiting to hold a new segment.
type freeFile struct {
	path string
	size int64
}

// recycleFiles is how many dropped segments' files a journal keeps for
// reuse, the largest. A checkpoint starts a segment and drops about one,
// so one would do for a single machine; a few cover machines whose
// checkpoints raise the floor together, and each costs up to a segment's
// size of disk.
const recycleFiles = 4

// Open opens the journal in dir, creating it if needed, reads its latest
// checkpoint and the records after it (Recovered), and passes over a
// torn tail.
func Open(dir string, keys *seal.Keys, o Options) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	states, err := disk.OpenWith(filepath.Join(dir, "checkpoints"), checkpointStore)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("journal: %w", err)
	}
	j := &Journal{dir: dir, keys: keys, sync: !o.NoSync, lock: lock, states: states,
		uncovered: map[durable.MachineID][]uint64{}, cps: map[durable.MachineID]*slots{}}
	j.done = sync.NewCond(&j.mu)
	if err := checkIdent(dir, keys); err != nil {
		j.Crash()
		return nil, err
	}
	if err := j.recover(); err != nil {
		j.Crash()
		return nil, err
	}
	if err := j.nextIncarnation(); err != nil {
		j.Crash()
		return nil, err
	}
	return j, nil
}

// Opener returns what opens the journal in dir under a store's keys, for
// kv.Config.OpenJournal.
func Opener(dir string, o Options) func(*seal.Keys) (durable.Journal, error) {
	return func(keys *seal.Keys) (durable.Journal, error) {
		j, err := Open(dir, keys, o)
		if err != nil {
			return nil, err // never a typed nil
		}
		return j, nil
	}
}

// lockDir takes the lock of a journal directory, so that two processes
// never append to one journal.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: %s is in use by another process (is another oblivkv running on this data dir?): %w", dir, err)
	}
	return f, nil
}

// recover loads the checkpoints and the log, and opens a new segment for
// appends.
func (j *Journal) recover() error {
	cps, err := j.loadCheckpoints()
	if err != nil {
		return err
	}
	segs, free, err := listDir(j.dir)
	if err != nil {
		return err
	}
	j.free = free
	rec := &durable.Recovery{Checkpoints: cps}
	next := j.floor + 1
	for i, s := range segs {
		recs, err := readSegment(s, j.keys, nextFirst(segs, i))
		if err != nil {
			return err
		}
		for _, r := range recs {
			switch {
			case r.LSN < next:
				continue // below the floor
			case r.LSN > next:
				return fmt.Errorf("%w: record %d follows record %d", ErrCorrupt, r.LSN, next-1)
			}
			next++
			if cp, ok := cps[r.Machine]; ok && r.LSN <= cp.At {
				continue // covered by its machine's checkpoint
			}
			rec.Records = append(rec.Records, r)
			j.uncovered[r.Machine] = append(j.uncovered[r.Machine], r.LSN)
			j.size += int64(len(r.Data))
		}
	}
	j.recovered = rec
	j.segs, j.next = segs, next
	j.written, j.durable = next-1, next-1
	return j.rotate()
}

// Recovered returns what Open found: every machine's latest checkpoint,
// and the records no checkpoint covers, in order. It hands them over
// once: later calls return nothing.
func (j *Journal) Recovered() durable.Recovery {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.recovered
	j.recovered = nil
	if r == nil {
		return durable.Recovery{Checkpoints: map[durable.MachineID]durable.Checkpoint{}}
	}
	return *r
}

// Incarnation returns this open's incarnation: one more than the
// previous open's, durable since Open returned (durable.Journal).
func (j *Journal) Incarnation() uint64 { return j.incarnation }

// Last returns the LSN of the last record appended (0 when none ever was).
func (j *Journal) Last() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next - 1
}

// Size returns the bytes of record data appended since the last
// checkpoint, or since Open for records recovered: what replay would read.
func (j *Journal) Size() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size
}

// Append adds a record of machine m and returns its LSN; it is durable
// once Sync(lsn) returns. Records are durable in LSN order.
func (j *Journal) Append(m durable.MachineID, data []byte) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	lsn := j.next
	j.next++
	j.pending = appendRecord(j.pending, j.keys, lsn, m, data)
	j.uncovered[m] = append(j.uncovered[m], lsn)
	j.size += int64(len(data))
	j.stats.Records++
	return lsn
}

// Commit appends a record of machine m and waits until it is durable.
func (j *Journal) Commit(m durable.MachineID, data []byte) (uint64, error) {
	lsn := j.Append(m, data)
	return lsn, j.Sync(lsn)
}

// Sync waits until every record up to lsn is durable. Concurrent callers
// share one write and one sync: the first to find no group in progress
// lets the writers ready to run append theirs (gather), then writes
// everything appended so far; the others wait for it.
func (j *Journal) Sync(lsn uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	gathered := false
	for j.durable < lsn && j.err == nil {
		switch {
		case j.flushing:
			j.done.Wait()
		case !gathered:
			j.gather()
			gathered = true
		default:
			j.flushGroup()
		}
	}
	return j.err
}

// gather lets the goroutines that can run now append to the group about
// to be written before it is taken, so writers that come together share
// one fsync: it yields the processor once, with the group marked under
// way so that the Syncs those goroutines call wait for it instead of
// writing their own. An fsync costs about 60 µs of system CPU besides its
// wait; measured under 256 clients, the yield halved cloak's fsyncs and
// cut oblivistore's by nearly two thirds. Without syncs there is nothing
// to share. j.mu is held, and released during the yield; the caller
// checks again whether to write (the journal may have closed meanwhile).
func (j *Journal) gather() {
	if !j.sync {
		return
	}
	j.flushing = true
	j.mu.Unlock()
	runtime.Gosched()
	j.mu.Lock()
	j.flushing = false
	j.done.Broadcast()
}

// flushGroup writes and syncs the records pending; j.mu is held, and
// released while the file is written.
func (j *Journal) flushGroup() {
	buf, last, f, off := j.pending, j.next-1, j.seg, j.segOff
	j.pending, j.flushing = nil, true
	j.mu.Unlock()
	_, err := f.WriteAt(buf, off)
	if err == nil && j.sync {
		err = fdatasync(f)
	}
	j.mu.Lock()
	j.flushing = false
	if err != nil {
		j.err = fmt.Errorf("journal: writing records up to %d: %w", last, err)
	} else {
		j.written, j.durable = last, last
		j.segOff = off + int64(len(buf))
		j.stats.Groups++
		if j.sync {
			j.stats.Fsyncs++
		}
		j.stats.Bytes += uint64(len(buf))
	}
	j.done.Broadcast()
}

// Checkpoint saves state, machine m's whole state after record at (its
// records up to at applied), and drops the log up to the floor. The
// caller must not append records of m older than at's state afterwards;
// records appended after at stay, and other machines append meanwhile.
// A machine's checkpoints alternate between its two slots, each with a
// generation one above the last, so a checkpoint torn by a crash leaves
// the previous one whole, and of two at the same position the later
// wins.
func (j *Journal) Checkpoint(ctx context.Context, m durable.MachineID, state []byte, at uint64) error {
	j.cpMu.Lock()
	defer j.cpMu.Unlock()
	sl := j.slotsOf(m)
	if at < sl.at {
		return fmt.Errorf("journal: a checkpoint of machine %d at %d, behind its checkpoint at %d", m, at, sl.at)
	}
	if err := j.Sync(at); err != nil {
		return err
	}
	j.mu.Lock()
	err := j.rotateLocked()
	states := j.states // nil once a Crash or Close released it
	if err == nil && states == nil {
		err = j.err
	}
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if err := saveCheckpoint(ctx, states, j.keys, slotAddr(m, sl.next), sl.gen+1, at, state); err != nil {
		return fmt.Errorf("journal: writing a checkpoint of machine %d: %w", m, err)
	}
	sl.next, sl.gen, sl.at = 1-sl.next, sl.gen+1, at
	return j.raiseFloor(ctx, states, m, at)
}

// slotsOf returns machine m's slots; j.cpMu is held.
func (j *Journal) slotsOf(m durable.MachineID) *slots {
	sl := j.cps[m]
	if sl == nil {
		sl = &slots{}
		j.cps[m] = sl
	}
	return sl
}

// raiseFloor forgets m's records up to at, its new checkpoint's position,
// then saves the floor they let the log rise to and drops the segments
// below it; j.cpMu is held.
func (j *Journal) raiseFloor(ctx context.Context, states *disk.Backend, m durable.MachineID, at uint64) error {
	j.mu.Lock()
	left := j.uncovered[m]
	for len(left) > 0 && left[0] <= at {
		left = left[1:]
	}
	j.uncovered[m] = left
	floor := j.next - 1
	for _, lsns := range j.uncovered {
		if len(lsns) > 0 {
			floor = min(floor, lsns[0]-1)
		}
	}
	j.stats.Checkpoints++
	j.mu.Unlock()
	if floor <= j.floor {
		return nil
	}
	sealed := j.keys.Seal(nil, floorAD, binary.BigEndian.AppendUint64(nil, floor))
	if err := states.Write(ctx, []backend.Item{{Addr: floorAddr, Value: sealed}}); err != nil {
		return fmt.Errorf("journal: saving the floor: %w", err)
	}
	j.floor = floor
	return j.dropUpTo(floor)
}

// Stats returns the journal's counters.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stats
}

// fdatasync flushes f's data to disk, and its size when a write grew it;
// unlike fsync it leaves out what reading the data does not need (the
// file's times), so a write over allocated blocks commits nothing to the
// file system's journal.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	cerr := rc.Control(func(fd uintptr) {
		for {
			if err = syscall.Fdatasync(int(fd)); err != syscall.EINTR {
				return
			}
		}
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// dropUpTo drops the segments whose records are all at or before lsn,
// keeping their files for reuse (recycle), and forgets their size.
func (j *Journal) dropUpTo(lsn uint64) error {
	j.mu.Lock()
	n := 0
	for n+1 < len(j.segs) && j.segs[n+1].first <= lsn+1 {
		n++
	}
	dropped := j.segs[:n]
	j.segs = j.segs[n:]
	j.size = 0 // an estimate from here: records after lsn are few
	err := j.recycle(dropped)
	j.mu.Unlock()
	if err != nil {
		return err
	}
	// Synced without j.mu, so commits go on meanwhile: no record depends
	// on these renames (a segment dropped is below the floor, saved
	// already), and a rotation that takes a free file syncs the
	// directory itself before anything is written into it.
	return syncDir(j.dir)
}

// recycle renames the files of dropped segments to free files, then
// deletes the smallest free files beyond recycleFiles; j.mu is held.
func (j *Journal) recycle(dropped []segment) error {
	for _, s := range dropped {
		info, err := os.Stat(s.path)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		path := filepath.Join(j.dir, fmt.Sprintf(freeName, s.first))
		if err := os.Rename(s.path, path); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.free = append(j.free, freeFile{path: path, size: info.Size()})
	}
	sortLargestFirst(j.free)
	for len(j.free) > recycleFiles {
		last := j.free[len(j.free)-1]
		if err := os.Remove(last.path); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.free = j.free[:len(j.free)-1]
	}
	return nil
}

// rotate starts a new segment.
func (j *Journal) rotate() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rotateLocked()
}

// rotateLocked writes what is pending to the current segment and starts
// a new one; j.mu is held. Records appended while the last group was
// written are still pending: the new segment starts with the first
// record not written. With nothing written since the current segment
// began, that is the current segment, which goes on.
func (j *Journal) rotateLocked() error {
	for j.flushing {
		j.done.Wait()
	}
	if j.err != nil {
		return j.err
	}
	if j.seg != nil && len(j.pending) > 0 {
		j.flushGroup()
		if j.err != nil {
			return j.err
		}
	}
	s := segment{path: filepath.Join(j.dir, fmt.Sprintf(segmentName, j.written+1)), first: j.written + 1}
	n := len(j.segs)
	same := n > 0 && j.segs[n-1].path == s.path
	if same && j.seg != nil {
		return nil
	}
	if j.seg != nil {
		if err := j.seg.Close(); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.seg = nil
	}
	f, err := j.openSegment(s.path, same)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	j.seg, j.segOff = f, 0
	if !same {
		j.segs = append(j.segs, s)
	}
	return syncDir(j.dir)
}

// openSegment opens the file of a new segment at path, to be written
// from its start: the file there when exists (at Open, a last segment
// that holds no record), else the largest free file renamed to path, else
// a new file; j.mu is held.
func (j *Journal) openSegment(path string, exists bool) (*os.File, error) {
	switch {
	case exists:
	case len(j.free) > 0:
		if err := os.Rename(j.free[0].path, path); err != nil {
			return nil, err
		}
		j.free = j.free[1:]
		j.stats.SegmentsReused++
	default:
		return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	}
	return os.OpenFile(path, os.O_WRONLY, 0)
}

// Close writes what is pending and closes the journal.
func (j *Journal) Close() error {
	return errors.Join(j.Sync(j.Last()), j.release())
}

// Crash closes the journal as a crash would: records not yet written are
// lost, as if the process died. Tests use it to crash a store in process.
func (j *Journal) Crash() { j.release() }

// release closes the files and the lock; what is pending is dropped.
func (j *Journal) release() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var err error
	if j.seg != nil {
		err = j.seg.Close()
		j.seg = nil
	}
	if j.states != nil {
		err = errors.Join(err, j.states.Close())
		j.states = nil
	}
	if j.lock != nil {
		err = errors.Join(err, j.lock.Close())
		j.lock = nil
	}
	j.pending = nil
	if j.err == nil {
		j.err = errors.New("journal: closed")
	}
	return err
}

// slotAddr is the address of one of machine m's checkpoint slots.
func slotAddr(m durable.MachineID, slot int) string {
	return fmt.Sprintf("%s%d/%d", machinePrefix, m, slot)
}

// machinePrefix begins the address of every machine's checkpoint slots.
const machinePrefix = "machine/"

// legacySlotAddr is the address of an earlier build's checkpoint slots.
func legacySlotAddr(slot int) string { return fmt.Sprintf("checkpoint/%d", slot) }

// floorAddr is where the checkpoint store keeps the floor (8 bytes,
// big-endian, sealed). A journal without one is an earlier build's, whose
// floor is its checkpoint's position.
const floorAddr = "floor"

var floorAD = []byte("oblivkv journal floor")

// ErrWrongKey reports a journal sealed under another key.
var ErrWrongKey = durable.ErrWrongKey

// identFile holds a record sealed under the journal's key: Open checks it
// before reading anything, so a wrong key is refused instead of every
// record being taken for a torn tail.
const identFile = "ident"

var identAD = []byte("oblivkv journal ident")

// checkIdent checks, or for a new journal writes, dir's identity record.
func checkIdent(dir string, keys *seal.Keys) error {
	path := filepath.Join(dir, identFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if segs, err := listSegments(dir); err != nil || len(segs) > 0 {
			return errors.Join(err, fmt.Errorf("%w: %s has log segments but no %s", ErrCorrupt, dir, identFile))
		}
		return writeFileSync(path, keys.Seal(nil, identAD, identAD))
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return openIdent(keys, b)
}

// openIdent checks an identity record against keys.
func openIdent(keys *seal.Keys, b []byte) error {
	if _, err := keys.Open(nil, identAD, b); err != nil {
		return ErrWrongKey
	}
	return nil
}

// checkIdentOnly checks dir's identity record, which must exist.
func checkIdentOnly(dir string, keys *seal.Keys) error {
	b, err := os.ReadFile(filepath.Join(dir, identFile))
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return openIdent(keys, b)
}

// writeFileSync writes a new file durably (atomicfile.Write).
func writeFileSync(path string, b []byte) error {
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// incarnationAddr is where the checkpoint store keeps the incarnation of
// the journal's latest open (8 bytes, big-endian, sealed): one address,
// written in one synced batch, so a crash leaves the old value or the
// new. A journal written before incarnations were kept has none, and
// reads as incarnation 0.
const incarnationAddr = "incarnation"

var incarnationAD = []byte("oblivkv journal incarnation")

// nextIncarnation makes this open's incarnation, one above the previous
// open's, and makes it durable.
func (j *Journal) nextIncarnation() error {
	ctx := context.Background()
	prev, err := readIncarnation(ctx, j.states, j.keys)
	if err != nil {
		return err
	}
	if prev >= durable.MaxIncarnation {
		return fmt.Errorf("journal: opened %d times, the most its fencing tokens allow", prev)
	}
	sealed := j.keys.Seal(nil, incarnationAD, binary.BigEndian.AppendUint64(nil, prev+1))
	if err := j.states.Write(ctx, []backend.Item{{Addr: incarnationAddr, Value: sealed}}); err != nil {
		return fmt.Errorf("journal: saving the incarnation: %w", err)
	}
	j.incarnation = prev + 1
	return nil
}

// readIncarnation returns the incarnation the checkpoint store keeps (0:
// none kept).
func readIncarnation(ctx context.Context, states *disk.Backend, keys *seal.Keys) (uint64, error) {
	vals, err := states.Read(ctx, []string{incarnationAddr})
	if err != nil {
		return 0, fmt.Errorf("journal: reading the incarnation: %w", err)
	}
	if vals[0] == nil {
		return 0, nil
	}
	plain, err := keys.Open(nil, incarnationAD, vals[0])
	if err != nil || len(plain) != 8 {
		return 0, fmt.Errorf("%w: the incarnation does not read back", ErrCorrupt)
	}
	return binary.BigEndian.Uint64(plain), nil
}

// LastIncarnation returns the incarnation of the latest open of the
// journal in dir, which nobody may hold open (see Lock), without writing
// anything.
func LastIncarnation(dir string, keys *seal.Keys) (uint64, error) {
	if err := checkIdentOnly(dir, keys); err != nil {
		return 0, err
	}
	states, err := disk.OpenWith(filepath.Join(dir, "checkpoints"), readOnly(checkpointStore))
	if err != nil {
		return 0, fmt.Errorf("journal: %w", err)
	}
	defer states.Close()
	return readIncarnation(context.Background(), states, keys)
}

// Lock takes the lock of the journal directory dir, as Open does, for a
// caller that reads the directory's files while no store may open it (a
// backup of a stopped store); closing the file releases it.
func Lock(dir string) (*os.File, error) { return lockDir(dir) }

// checkpointHeader is the size of a checkpoint's header: its generation
// and its position in the log (8 bytes each, big-endian).
const checkpointHeader = 16

// saveCheckpoint saves a checkpoint, with its header, at addr.
func saveCheckpoint(ctx context.Context, states *disk.Backend, keys *seal.Keys, addr string, gen, at uint64, state []byte) error {
	plain := make([]byte, 0, checkpointHeader+len(state))
	plain = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(plain, gen), at)
	return sealedstate.SaveBytes(ctx, states, keys, addr, append(plain, state...), 0)
}

// loadCheckpoints returns every machine's latest checkpoint and sets the
// floor, after moving an earlier build's checkpoint to machine 0's slots.
func (j *Journal) loadCheckpoints() (map[durable.MachineID]durable.Checkpoint, error) {
	ctx := context.Background()
	if err := j.upgradeLegacy(ctx); err != nil {
		return nil, err
	}
	addrs := map[durable.MachineID][]string{}
	err := j.states.Scan(ctx, machinePrefix, func(addr string) error {
		var m durable.MachineID
		var slot int
		if n, err := fmt.Sscanf(addr, machinePrefix+"%d/%d", &m, &slot); n == 2 && err == nil && addr == slotAddr(m, slot) {
			addrs[m] = append(addrs[m], addr)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal: listing checkpoints: %w", err)
	}
	cps := map[durable.MachineID]durable.Checkpoint{}
	for m, as := range addrs {
		cp, sl, ok, err := j.latest(ctx, as)
		if err != nil {
			return nil, fmt.Errorf("%w: machine %d's %w", ErrCorrupt, m, err)
		}
		if ok {
			cps[m], j.cps[m] = cp, sl
		}
	}
	floor, err := j.loadFloor(ctx)
	j.floor = floor
	return cps, err
}

// latest reads the checkpoint slots at addrs and returns the one of the
// highest generation, and the slots' state; ok is false when none holds a
// whole checkpoint.
func (j *Journal) latest(ctx context.Context, addrs []string) (cp durable.Checkpoint, sl *slots, ok bool, err error) {
	sl = &slots{}
	for _, addr := range addrs {
		plain, err := sealedstate.LoadBytes(ctx, j.states, j.keys, addr)
		switch {
		case err != nil:
			// Never written, or torn by a crash while it was written: the
			// other slot holds the latest checkpoint, which Checkpoint
			// wrote before it.
			continue
		case len(plain) < checkpointHeader:
			return cp, nil, false, fmt.Errorf("checkpoint at %s is malformed", addr)
		}
		if gen := binary.BigEndian.Uint64(plain); !ok || gen > sl.gen {
			cp = durable.Checkpoint{State: plain[checkpointHeader:], At: binary.BigEndian.Uint64(plain[8:])}
			sl.gen, sl.at, ok = gen, cp.At, true
			sl.next = 1 - slotOf(addr)
		}
	}
	return cp, sl, ok, nil
}

// slotOf is the slot number an address of slotAddr or legacySlotAddr
// ends with.
func slotOf(addr string) int { return int(addr[len(addr)-1] - '0') }

// upgradeLegacy moves an earlier build's checkpoint to machine 0's slots
// (unless a crash cut an earlier move short after it was done), with its
// generation and position, and saves its position as the floor; then it
// deletes the earlier build's slots, so that build refuses the journal
// (as lost) rather than miss the records this one appends.
func (j *Journal) upgradeLegacy(ctx context.Context) error {
	legacy := []string{legacySlotAddr(0), legacySlotAddr(1)}
	cp, sl, ok, err := j.latest(ctx, legacy)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if !ok {
		return nil
	}
	_, _, moved, err := j.latest(ctx, []string{slotAddr(0, 0), slotAddr(0, 1)})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if !moved {
		if err := saveCheckpoint(ctx, j.states, j.keys, slotAddr(0, 1-sl.next), sl.gen, cp.At, cp.State); err != nil {
			return fmt.Errorf("journal: moving an earlier build's checkpoint: %w", err)
		}
		sealed := j.keys.Seal(nil, floorAD, binary.BigEndian.AppendUint64(nil, cp.At))
		if err := j.states.Write(ctx, []backend.Item{{Addr: floorAddr, Value: sealed}}); err != nil {
			return fmt.Errorf("journal: saving the floor: %w", err)
		}
	}
	for _, addr := range legacy {
		if err := sealedstate.Delete(ctx, j.states, j.keys, addr); err != nil && !errors.Is(err, seal.ErrTampered) {
			return fmt.Errorf("journal: deleting an earlier build's checkpoint: %w", err)
		}
	}
	return nil
}

// loadFloor reads the floor (0 for a journal that never dropped records).
func (j *Journal) loadFloor(ctx context.Context) (uint64, error) {
	vals, err := j.states.Read(ctx, []string{floorAddr})
	if err != nil {
		return 0, fmt.Errorf("journal: reading the floor: %w", err)
	}
	if vals[0] == nil {
		return 0, nil
	}
	plain, err := j.keys.Open(nil, floorAD, vals[0])
	if err != nil || len(plain) != 8 {
		return 0, fmt.Errorf("%w: the floor does not read back", ErrCorrupt)
	}
	return binary.BigEndian.Uint64(plain), nil
}

// Record layout: length of the sealed data (4 bytes), LSN (8), machine
// (4), the sealed data (AES-GCM, bound to the LSN and the machine),
// CRC-32C of all of the above (4). An earlier build's records (legacy
// segments) have no machine, and their seal is bound to the LSN alone.
const (
	headerSize       = 4 + 8 + 4
	legacyHeaderSize = 4 + 8
	trailerSize      = 4
	maxRecord        = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ad is the associated data binding a record to its LSN and machine.
func ad(lsn uint64, m durable.MachineID) []byte {
	return binary.BigEndian.AppendUint32(legacyAD(lsn), uint32(m))
}

// legacyAD is the associated data of an earlier build's record.
func legacyAD(lsn uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("oblivkv journal record "), lsn)
}

func appendRecord(dst []byte, keys *seal.Keys, lsn uint64, m durable.MachineID, data []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(data)+keys.Overhead()))
	dst = binary.BigEndian.AppendUint64(dst, lsn)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m))
	dst = keys.Seal(dst, ad(lsn, m), data)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// parseRecord reads the record at the start of b, of this format or
// (legacy) an earlier build's: its LSN, machine and data, and its length
// in bytes; ok is false when b does not start with a whole record whose
// checksum and seal hold.
func parseRecord(b []byte, keys *seal.Keys, legacy bool) (Record, int, bool) {
	hdr := headerSize
	if legacy {
		hdr = legacyHeaderSize
	}
	if len(b) < hdr+trailerSize {
		return Record{}, 0, false
	}
	n := int(binary.BigEndian.Uint32(b))
	total := hdr + n + trailerSize
	if n > maxRecord || total > len(b) {
		return Record{}, 0, false
	}
	if crc32.Checksum(b[:hdr+n], castagnoli) != binary.BigEndian.Uint32(b[hdr+n:]) {
		return Record{}, 0, false
	}
	r := Record{LSN: binary.BigEndian.Uint64(b[4:])}
	recAD := legacyAD(r.LSN)
	if !legacy {
		r.Machine = durable.MachineID(binary.BigEndian.Uint32(b[12:]))
		recAD = ad(r.LSN, r.Machine)
	}
	data, err := keys.Open(nil, recAD, b[hdr:hdr+n])
	if err != nil {
		return Record{}, 0, false
	}
	r.Data = data
	return r, total, true
}

// readSegment returns the records of segment s, which ends before the
// record until, the next segment's first (0: s is the last segment).
// What follows a segment's records in its file is a stale or a torn tail
// (see the package doc): a segment that is not the last ends at until,
// and a bad record before it is ErrCorrupt; the last ends at its first
// bad record, unless a whole record at or after that record's LSN
// follows, which is ErrCorrupt. A segment whose file ends before until
// returns the records it holds: recover finds the gap.
func readSegment(s segment, keys *seal.Keys, until uint64) ([]Record, error) {
	b, err := os.ReadFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var recs []Record
	for off := 0; off < len(b); {
		want := s.first + uint64(len(recs))
		if want == until {
			break
		}
		r, n, ok := parseRecord(b[off:], keys, s.legacy)
		if ok && r.LSN == want {
			recs, off = append(recs, r), off+n
			continue
		}
		if until != 0 || anyRecordAfter(b[off+1:], keys, s.legacy, want) {
			return nil, fmt.Errorf("%w: %s: a bad record at byte %d, before records that read back", ErrCorrupt, filepath.Base(s.path), off)
		}
		break
	}
	return recs, nil
}

// nextFirst returns the LSN the segment after segs[i] starts at, where
// segs[i] ends (0: segs[i] is the last).
func nextFirst(segs []segment, i int) uint64 {
	if i+1 < len(segs) {
		return segs[i+1].first
	}
	return 0
}

// anyRecordAfter reports whether b holds, at any offset, a whole record
// with an LSN at or after lsn, the LSN of a bad record just before b.
// Records are written in LSN order, so the records between lsn and such
// a record lie in b before it, and its LSN is at most lsn plus b's
// length: each header's LSN is checked against that window before its
// checksum, so a long stale tail (records of lower LSNs, random bytes)
// costs one pass over b.
func anyRecordAfter(b []byte, keys *seal.Keys, legacy bool, lsn uint64) bool {
	for off := 0; off+legacyHeaderSize <= len(b); off++ {
		if at := binary.BigEndian.Uint64(b[off+4:]); at < lsn || at-lsn > uint64(len(b)) {
			continue
		}
		if _, _, ok := parseRecord(b[off:], keys, legacy); ok {
			return true
		}
	}
	return false
}

// The names of segment files, from the LSN of their first record: this
// format's, and an earlier build's; and of free files, from the LSN of
// the first record of the segment they held.
const (
	segmentName       = "mlog-%016x"
	legacySegmentName = "log-%016x"
	freeName          = "free-%016x"
)

// parseName returns the number in name, a file name of format (one of
// the names above), and whether name is one.
func parseName(name, format string) (uint64, bool) {
	var n uint64
	_, err := fmt.Sscanf(name, format, &n)
	return n, err == nil && name == fmt.Sprintf(format, n)
}

// FreeFile reports whether name, a path relative to a journal directory,
// is a dropped segment's file waiting for reuse: garbage, which a copy of
// the journal leaves out.
func FreeFile(name string) bool {
	_, ok := parseName(name, freeName)
	return ok
}

// listSegments returns the segment files of dir, oldest first.
func listSegments(dir string) ([]segment, error) {
	segs, _, err := listDir(dir)
	return segs, err
}

// listDir returns the segment files of dir, oldest first, and its free
// files, largest first.
func listDir(dir string) ([]segment, []freeFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: %w", err)
	}
	var segs []segment
	var free []freeFile
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if first, ok := parseName(e.Name(), segmentName); ok {
			segs = append(segs, segment{path: path, first: first})
		} else if first, ok := parseName(e.Name(), legacySegmentName); ok {
			segs = append(segs, segment{path: path, first: first, legacy: true})
		} else if FreeFile(e.Name()) {
			info, err := e.Info()
			if err != nil {
				return nil, nil, fmt.Errorf("journal: %w", err)
			}
			free = append(free, freeFile{path: path, size: info.Size()})
		}
	}
	slices.SortFunc(segs, func(a, b segment) int { return cmp.Compare(a.first, b.first) })
	sortLargestFirst(free)
	return segs, free, nil
}

// sortLargestFirst sorts free files by size, largest first.
func sortLargestFirst(free []freeFile) {
	slices.SortFunc(free, func(a, b freeFile) int { return cmp.Compare(b.size, a.size) })
}

// syncDir makes a directory's entries (created or removed files) durable.
func syncDir(dir string) error {
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}
