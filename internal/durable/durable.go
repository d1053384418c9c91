// Package durable is the write-ahead discipline a protocol follows to
// survive a crash: every state transition is journaled (internal/durable/journal),
// with the backend writes it plans, before those writes are issued and
// before any client is answered; recovery (Replay) restores the
// protocol's state (its Machine) from the last checkpoint, applies the
// transitions after it and redoes their backend writes in order; a
// checkpoint of the protocol's whole state replaces the journal
// every so many transitions.
//
// A transition's record holds the protocol's own description of the
// change (opaque here) and its backend operations, as the sealed bytes the
// protocol hands the backend. Redoing them is idempotent: each is a whole
// overwrite (or delete) of its addresses, so redoing every record since
// the checkpoint, in order, leaves storage exactly as the last of them
// left it, whether or not the crash let them through. Storage learns
// nothing new from it: it sees again writes it saw before, or would have.
//
// At every checkpoint storage gets a sealed anchor naming the checkpoint's
// position in the journal; recovery refuses storage whose anchor is older
// than the proxy's checkpoint (restored from an older copy, or behind the
// writes the proxy made since) with both positions in the error.
//
// Every open of a store is a new incarnation, counted by its journal
// (Log.Incarnation): it grows by one at each open, after a crash too, and
// is durable before the store writes anything to storage. A storage
// write's fencing token (FenceToken) is the incarnation with the journal
// position of the record that caused it, so a process started later
// always writes with higher tokens than every earlier process of the
// store, and storage refuses the earlier one's late writes
// (backend.Fence). Storage sees every token in the clear: how often the
// store was opened, and the journal position behind each fenced write; a
// driver whose record count between two writes must stay hidden needs
// another low part. The incarnation is only as unique as the journal: a
// store opened from a copy of its data dir gets the copy's incarnation
// plus one, which a process still running on the original may hold too;
// their equal-incarnation tokens would then not fence each other. The
// anchor catches the common case: a copy older than storage's last
// checkpoint is refused at open with ErrRollback before it writes
// anything to storage. A copy taken since that checkpoint passes, and running two
// processes over one storage from copies of one data dir remains the
// operator's mistake to avoid.
//
// The package owns the record format, the anchor, the fencing tokens and
// the rules for a store that is new, unfinished or lost. It must never let
// a protocol's backend write precede its record's durability, and never
// serve a store whose trusted state and storage disagree on where they
// stand.
package durable

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/seal"
)

// AnchorAddr is the storage address of the anchor (package kv reserves
// "meta/").
const AnchorAddr = "meta/anchor"

// DefaultEvery is how many records a log holds before Due reports that a
// checkpoint is due.
const DefaultEvery = 1000

// Op is one backend operation a record plans, issued in order: a Write of
// Items, or a Delete of Addrs.
type Op struct {
	Items []backend.Item
	Addrs []string
}

// Errors of recovery.
var (
	// ErrRollback reports storage older than the proxy's trusted state:
	// restored from an older copy, or it lost acknowledged writes. Such a
	// store is refused at open, never served (kv.ErrRollback is this).
	ErrRollback = errors.New("storage is older than the proxy's trusted state (restored from an older copy, or it lost acknowledged writes)")
	// ErrLost reports a store whose journal is gone.
	ErrLost = errors.New("the store's journal is missing or empty: its trusted state is lost")
	// ErrForeign reports a journal that holds another store's state.
	ErrForeign = errors.New("the storage holds no store, but the journal holds one's state")
	// ErrWrongKey reports a journal sealed under other keys.
	ErrWrongKey = errors.New("the journal is sealed under another key (wrong key file?)")
	// ErrNoJournal reports an existing store opened without a journal.
	ErrNoJournal = errors.New("the store needs its journal to be reopened, and none was given")
)

// Journal is the trusted, append-only log a Log keeps its records and
// checkpoints in, on the proxy's side of the Tap. Package journal keeps
// one in files on the proxy's disk; kv carries it to a protocol without
// knowing which.
type Journal interface {
	// Append adds a record and returns its LSN (from 1, consecutive); it
	// is durable once Sync(lsn) returns, and records are durable in order.
	Append(data []byte) uint64
	// Sync waits until every record up to lsn is durable.
	Sync(lsn uint64) error
	// Last returns the LSN of the last record appended (0: none ever).
	Last() uint64
	// Recovered hands over, once, what the journal held when opened: the
	// latest checkpoint (nil when none, at = 0) and the records after it.
	Recovered() (checkpoint []byte, at uint64, records []Record)
	// Checkpoint replaces the records up to at by state, once they are
	// durable.
	Checkpoint(ctx context.Context, state []byte, at uint64) error
	// Incarnation returns how many times the journal has been opened,
	// this open included (a journal that never kept it counts from 0):
	// it grows by one at every open and is durable before the open
	// returns, so before the store writes anything to storage.
	Incarnation() uint64
	// Stats returns the journal's counters since it was opened.
	Stats() JournalStats
	// Close releases the journal.
	Close() error
}

// Record is one record of a Journal.
type Record struct {
	LSN  uint64
	Data []byte
}

// JournalStats count a journal's work since it was opened.
type JournalStats struct {
	Records     uint64 // records appended
	Groups      uint64 // group writes
	Fsyncs      uint64 // fsyncs of the log (one per group, none without fsync)
	Bytes       uint64 // bytes written to the log
	Checkpoints uint64 // checkpoints written
}

// Log is one store's write-ahead log, safe for concurrent use. A nil
// journal makes it a log that keeps nothing: the store works, and cannot
// be reopened.
type Log struct {
	j     Journal
	b     backend.Backend
	keys  *seal.Keys
	every uint64
	since atomic.Uint64 // records since the last checkpoint
}

// New returns the log of a store over b, journaled in j (nil: none).
func New(j Journal, b backend.Backend, keys *seal.Keys) *Log {
	return &Log{j: j, b: b, keys: keys, every: DefaultEvery}
}

// SetEvery sets how many records make a checkpoint due (DefaultEvery
// unless set).
func (l *Log) SetEvery(n uint64) { l.every = max(n, 1) }

// Durable reports whether the log keeps anything.
func (l *Log) Durable() bool { return l.j != nil }

// Append journals a transition (delta, the protocol's description, and the
// backend operations it plans) and returns its LSN; it is durable once
// Sync(lsn) returns. Appends are durable in order.
func (l *Log) Append(delta []byte, ops ...Op) uint64 {
	if l.j == nil {
		return 0
	}
	l.since.Add(1)
	return l.j.Append(encode(delta, ops))
}

// Sync waits until every record up to lsn is durable.
func (l *Log) Sync(lsn uint64) error {
	if l.j == nil {
		return nil
	}
	return l.j.Sync(lsn)
}

// Commit is Append and Sync.
func (l *Log) Commit(delta []byte, ops ...Op) (uint64, error) {
	lsn := l.Append(delta, ops...)
	return lsn, l.Sync(lsn)
}

// Due reports whether enough records have accumulated for a checkpoint.
// It counts records, never bytes, so when checkpoints happen depends only
// on how many transitions storage saw.
func (l *Log) Due() bool { return l.j != nil && l.since.Load() >= l.every }

// Incarnation returns the store's incarnation (Journal.Incarnation),
// from which its fencing tokens come (FenceToken); 0 for a log that
// keeps nothing.
func (l *Log) Incarnation() uint64 {
	if l.j == nil {
		return 0
	}
	return l.j.Incarnation()
}

// Last returns the LSN of the last record appended.
func (l *Log) Last() uint64 {
	if l.j == nil {
		return 0
	}
	return l.j.Last()
}

// Checkpoint replaces the journal up to record at by state, the protocol's
// whole state after it, once every backend write planned up to at has been
// issued: it makes the records up to at and storage durable
// (backend.Sync), writes the anchor and syncs it, then the checkpoint.
// Between checkpoints storage need not be durable (backend.DeferSync):
// the records after the checkpoint redo what it lost.
func (l *Log) Checkpoint(ctx context.Context, state []byte, at uint64) error {
	if l.j == nil {
		return nil
	}
	// The anchor must never name a record the journal could lose.
	if err := l.j.Sync(at); err != nil {
		return err
	}
	if err := backend.Sync(ctx, l.b); err != nil {
		return fmt.Errorf("durable: syncing storage for a checkpoint: %w", err)
	}
	anchor := l.keys.Seal(nil, []byte(AnchorAddr), binary.BigEndian.AppendUint64(nil, at))
	if err := l.b.Write(ctx, []backend.Item{{Addr: AnchorAddr, Value: anchor}}); err != nil {
		return fmt.Errorf("durable: writing the anchor: %w", err)
	}
	if err := backend.Sync(ctx, l.b); err != nil { // the anchor, under backend.DeferSync
		return fmt.Errorf("durable: syncing the anchor: %w", err)
	}
	if err := l.j.Checkpoint(ctx, state, at); err != nil {
		return err
	}
	l.since.Store(l.j.Last() - at)
	return nil
}

// Create starts the log of a new store whose initial layout is on storage
// and whose state is state: the checkpoint at position 0. A journal left
// by a creation that never finished (that checkpoint, and nothing after
// it) is overwritten; one holding any store's state is ErrForeign.
func (l *Log) Create(ctx context.Context, state []byte) error {
	if l.j == nil {
		return nil
	}
	cp, at, recs := l.j.Recovered()
	if (cp != nil && at > 0) || len(recs) > 0 {
		return fmt.Errorf("%w (checkpoint at %d, %d records after it): is this the right storage for this data dir? To create a new store here, remove the journal", ErrForeign, at, len(recs))
	}
	return l.Checkpoint(ctx, state, l.j.Last())
}

// recovery is what a store recovers: the state of its last checkpoint and
// the transitions after it.
type recovery struct {
	state  []byte   // the checkpoint's state
	deltas [][]byte // the protocol's deltas of the records after it, in order
	ops    []Op
}

// recover reads the store's checkpoint and the records after it, and
// checks the anchor on storage: ErrLost without a checkpoint, ErrRollback
// when storage's anchor is older than the checkpoint (or newer than the
// journal).
func (l *Log) recover(ctx context.Context) (recovery, error) {
	if l.j == nil {
		return recovery{}, ErrNoJournal
	}
	cp, at, recs := l.j.Recovered()
	if cp == nil {
		return recovery{}, ErrLost
	}
	if err := l.checkAnchor(ctx, at, l.j.Last()); err != nil {
		return recovery{}, err
	}
	r := recovery{state: cp}
	for _, rec := range recs {
		delta, ops, err := decode(rec.Data)
		if err != nil {
			return recovery{}, fmt.Errorf("durable: record %d: %w", rec.LSN, err)
		}
		r.deltas = append(r.deltas, delta)
		r.ops = append(r.ops, ops...)
	}
	l.since.Store(uint64(len(recs)))
	return r, nil
}

// redo issues, in order, every backend operation the recovered records
// planned.
func (l *Log) redo(ctx context.Context, r recovery) error {
	for i, op := range r.ops {
		var err error
		switch {
		case op.Items != nil:
			err = l.b.Write(ctx, op.Items)
		case op.Addrs != nil:
			err = l.b.Delete(ctx, op.Addrs)
		}
		if err != nil {
			return fmt.Errorf("durable: redoing backend operation %d of %d: %w", i+1, len(r.ops), err)
		}
	}
	return nil
}

// checkAnchor requires storage's anchor to lie between the checkpoint at
// and the journal's last record: anything older is a rollback (a crash
// between the anchor and the checkpoint leaves it newer than at).
func (l *Log) checkAnchor(ctx context.Context, at, last uint64) error {
	vals, err := l.b.Read(ctx, []string{AnchorAddr})
	if err != nil {
		return fmt.Errorf("durable: reading the anchor: %w", err)
	}
	if vals[0] == nil {
		return fmt.Errorf("%w: its anchor is missing (the proxy's checkpoint is at journal position %d)", ErrRollback, at)
	}
	plain, err := l.keys.Open(nil, []byte(AnchorAddr), vals[0])
	if err != nil {
		return fmt.Errorf("durable: the anchor: %w", err)
	}
	if len(plain) != 8 {
		return fmt.Errorf("%w: the anchor is malformed", seal.ErrTampered)
	}
	switch got := binary.BigEndian.Uint64(plain); {
	case got < at:
		return fmt.Errorf("%w: storage is at journal position %d, the proxy's checkpoint at %d", ErrRollback, got, at)
	case got > last:
		return fmt.Errorf("%w: storage is at journal position %d, beyond the journal's last record %d (the journal lost records: a power loss under --fsync none?)", ErrRollback, got, last)
	}
	return nil
}

// Record format: the delta (uvarint length and bytes), then the
// operations: a count, and for each a kind byte and its items.
const (
	opWrite byte = iota + 1
	opDelete
)

func encode(protocolDelta []byte, ops []Op) []byte {
	n := len(protocolDelta) + 16
	for _, op := range ops {
		for _, it := range op.Items {
			n += len(it.Addr) + len(it.Value) + 8
		}
		for _, a := range op.Addrs {
			n += len(a) + 4
		}
	}
	b := make([]byte, 0, n)
	b = delta.AppendBytes(b, protocolDelta)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, op := range ops {
		switch {
		case op.Items != nil:
			b = append(b, opWrite)
			b = binary.AppendUvarint(b, uint64(len(op.Items)))
			for _, it := range op.Items {
				b = delta.AppendBytes(delta.AppendBytes(b, []byte(it.Addr)), it.Value)
			}
		default:
			b = append(b, opDelete)
			b = binary.AppendUvarint(b, uint64(len(op.Addrs)))
			for _, a := range op.Addrs {
				b = delta.AppendBytes(b, []byte(a))
			}
		}
	}
	return b
}

func decode(b []byte) ([]byte, []Op, error) {
	d := delta.NewDecoder(b)
	protocolDelta := d.Bytes(math.MaxInt)
	ops := make([]Op, d.Count())
	for i := range ops {
		kind, n := d.Byte(), d.Count()
		switch kind {
		case opWrite:
			ops[i].Items = make([]backend.Item, n)
			for j := range n {
				ops[i].Items[j] = backend.Item{Addr: string(d.Bytes(math.MaxInt)), Value: d.Bytes(math.MaxInt)}
			}
		case opDelete:
			ops[i].Addrs = make([]string, n)
			for j := range n {
				ops[i].Addrs[j] = string(d.Bytes(math.MaxInt))
			}
		default:
			d.Check(d.Failed(), fmt.Sprint("an operation of kind ", kind))
		}
		if d.Failed() {
			break
		}
	}
	if err := d.Done(); err != nil {
		return nil, nil, err
	}
	return protocolDelta, ops, nil
}
