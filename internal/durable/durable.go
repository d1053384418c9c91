// Package durable is the write-ahead discipline a protocol follows to
// survive a crash: every state transition is journaled (internal/durable/journal),
// with the backend writes it plans, before those writes are issued and
// before any client is answered; recovery (Replay) restores the
// protocol's state (its Machine) from the last checkpoint, applies the
// transitions after it and redoes their backend writes in order; a
// checkpoint of the protocol's whole state replaces the journal
// every so many transitions.
//
// A store may be several machines (treebeard's layers, oblivistore's
// Front and partition groups), each with its own log (MachineLog) in the
// one journal: its records carry its MachineID, its checkpoints are its
// own, taken at its own position while the others go on appending, and
// recovery (ReplayMachines) restores each machine from its latest
// checkpoint and applies to it its own records and no other's. A store
// that is one machine is machine 0 (Log's own Append, Replay, ...), as is
// the whole state of a store an earlier build journaled.
//
// A transition's record holds the protocol's own description of the
// change (opaque here) and its backend operations, as the sealed bytes the
// protocol hands the backend. Redoing them is idempotent: each is a whole
// overwrite (or delete) of its addresses, so redoing every record since
// the checkpoint, in order, leaves storage exactly as the last of them
// left it, whether or not the crash let them through. Storage learns
// nothing new from it: it sees again writes it saw before, or would have.
//
// At every checkpoint storage gets a sealed anchor naming the highest
// position any machine has checkpointed at; recovery refuses storage
// whose anchor is older than some machine's checkpoint (restored from an
// older copy, or behind the writes the proxy made since) with both
// positions in the error. The anchor's write is fenced like the
// protocols' (AnchorFenceKey), so a deposed process's late checkpoint cannot
// move it.
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
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/seal"
)

// AnchorAddr is the storage address of the anchor (package kv reserves
// "meta/").
const AnchorAddr = "meta/anchor"

// AnchorFenceKey is the fence key (backend.Fence) of the anchor's writes.
const AnchorFenceKey = backend.FenceKeyPrefix + "anchor"

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

// MachineID names a machine of a store in its journal: each machine's
// records and checkpoints are its own. 0 is a store that is one machine.
type MachineID uint32

// Journal is the trusted, append-only log a Log keeps its records and
// checkpoints in, on the proxy's side of the Tap. Package journal keeps
// one in files on the proxy's disk; kv carries it to a protocol without
// knowing which.
type Journal interface {
	// Append adds a record of machine m and returns its LSN (from 1,
	// consecutive over every machine's records); it is durable once
	// Sync(lsn) returns, and records are durable in order.
	Append(m MachineID, data []byte) uint64
	// Sync waits until every record up to lsn is durable.
	Sync(lsn uint64) error
	// Last returns the LSN of the last record appended (0: none ever).
	Last() uint64
	// Recovered hands over, once, what the journal held when opened:
	// every machine's latest checkpoint and the records they do not
	// cover.
	Recovered() Recovery
	// Checkpoint replaces machine m's records up to at by state, once
	// they are durable; other machines append meanwhile.
	Checkpoint(ctx context.Context, m MachineID, state []byte, at uint64) error
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

// Recovery is what a journal held when opened.
type Recovery struct {
	// Checkpoints holds each machine's latest checkpoint.
	Checkpoints map[MachineID]Checkpoint
	// Records are every record its machine's checkpoint does not cover
	// (all of a machine's, when it has none), in LSN order.
	Records []Record
}

// Checkpoint is a machine's state as of the record at (0: before any).
type Checkpoint struct {
	State []byte
	At    uint64
}

// Record is one record of a Journal.
type Record struct {
	LSN     uint64
	Machine MachineID
	Data    []byte
}

// JournalStats count a journal's work since it was opened.
type JournalStats struct {
	Records        uint64 // records appended
	Groups         uint64 // group writes
	Fsyncs         uint64 // syncs of the log (one per group, none without fsync)
	Bytes          uint64 // bytes written to the log
	Checkpoints    uint64 // checkpoints written
	SegmentsReused uint64 // log segments started in a dropped segment's file
}

// Log is one store's write-ahead log, safe for concurrent use: the logs
// of its machines (Machine) in one journal. Its own Append, Commit, Due,
// Checkpoint, Create, Replay and CheckpointOf are machine 0's. A nil
// journal makes it a log that keeps nothing: the store works, and cannot
// be reopened.
type Log struct {
	j     Journal
	b     backend.Backend
	keys  *seal.Keys
	every atomic.Uint64

	mu       sync.Mutex
	machines map[MachineID]*MachineLog
	rec      *Recovery // the journal's, taken once

	anchorMu sync.Mutex
	anchor   uint64 // the highest position the anchor has named
}

// New returns the log of a store over b, journaled in j (nil: none).
func New(j Journal, b backend.Backend, keys *seal.Keys) *Log {
	l := &Log{j: j, b: b, keys: keys, machines: map[MachineID]*MachineLog{}}
	l.every.Store(DefaultEvery)
	return l
}

// SetEvery sets how many records of a machine make its checkpoint due
// (DefaultEvery unless set).
func (l *Log) SetEvery(n uint64) { l.every.Store(max(n, 1)) }

// Every returns how many records of a machine make its checkpoint due
// (SetEvery).
func (l *Log) Every() uint64 { return l.every.Load() }

// Durable reports whether the log keeps anything.
func (l *Log) Durable() bool { return l.j != nil }

// Machine returns machine m's log.
func (l *Log) Machine(m MachineID) *MachineLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	ml := l.machines[m]
	if ml == nil {
		ml = &MachineLog{l: l, id: m}
		l.machines[m] = ml
	}
	return ml
}

// MachineLog is one machine's log in its store's journal, safe for
// concurrent use.
type MachineLog struct {
	l  *Log
	id MachineID

	mu    sync.Mutex
	since []uint64 // LSNs of its records after its latest checkpoint
}

// ID returns the machine's ID.
func (m *MachineLog) ID() MachineID { return m.id }

// Append journals a transition of the machine (delta, the protocol's
// description, and the backend operations it plans) and returns its LSN;
// it is durable once Sync(lsn) returns. Appends are durable in order.
func (m *MachineLog) Append(delta []byte, ops ...Op) uint64 {
	if m.l.j == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	lsn := m.l.j.Append(m.id, encode(delta, ops))
	m.since = append(m.since, lsn)
	return lsn
}

// Commit is Append and Sync.
func (m *MachineLog) Commit(delta []byte, ops ...Op) (uint64, error) {
	lsn := m.Append(delta, ops...)
	return lsn, m.l.Sync(lsn)
}

// Due reports whether the machine's checkpoint is due: enough of its
// records have accumulated, or its oldest record no checkpoint covers
// lies lagBehind times that many records behind the journal's last, so
// that a machine appending rarely does not hold the journal's floor back
// for ever. It counts records, never bytes, so when checkpoints happen
// depends only on how many transitions storage saw.
func (m *MachineLog) Due() bool {
	if m.l.j == nil {
		return false
	}
	every := m.l.every.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := uint64(len(m.since))
	return n >= every || n > 0 && m.l.j.Last()-m.since[0] >= lagBehind*every
}

// lagBehind is how many checkpoint intervals of the whole journal a
// machine's oldest uncovered record may lie behind before its checkpoint
// is due.
const lagBehind = 4

// Checkpoint replaces the machine's records up to at by state, its whole
// state after them, once every backend write they planned has been
// issued: it makes the records up to at and storage durable
// (backend.Sync), writes the anchor and syncs it, then the checkpoint.
// Between checkpoints storage need not be durable (backend.DeferSync):
// the records after the checkpoint redo what it lost. The store's other
// machines go on appending meanwhile; checkpoints of several machines are
// written one at a time (the anchor only grows). The journal drops its
// records up to the first one some machine's checkpoint leaves uncovered
// (package journal).
func (m *MachineLog) Checkpoint(ctx context.Context, state []byte, at uint64) error {
	return m.l.CheckpointMachines(ctx, map[MachineID][]byte{m.id: state}, at)
}

// replaceRecords writes the machine's checkpoint, once the anchor names
// at.
func (m *MachineLog) replaceRecords(ctx context.Context, state []byte, at uint64) error {
	if err := m.l.j.Checkpoint(ctx, m.id, state, at); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.since) > 0 && m.since[0] <= at {
		m.since = m.since[1:]
	}
	return nil
}

// writeAnchor syncs storage and raises the anchor to at, unless it names
// a later position already: it only grows, so it is at least every
// machine's checkpoint position. Its write is fenced by the incarnation
// alone (anchorMu orders an open's anchor writes, and at stays sealed),
// so once a later open of the store has checkpointed, this one's anchor
// writes are refused (backend.ErrFenced).
func (l *Log) writeAnchor(ctx context.Context, at uint64) error {
	l.anchorMu.Lock()
	defer l.anchorMu.Unlock()
	if err := backend.Sync(ctx, l.b); err != nil {
		return fmt.Errorf("durable: syncing storage for a checkpoint: %w", err)
	}
	at = max(at, l.anchor)
	anchor := l.keys.Seal(nil, []byte(AnchorAddr), binary.BigEndian.AppendUint64(nil, at))
	fence := backend.Fence{Key: AnchorFenceKey, Token: FenceToken(l.Incarnation(), 0)}
	if err := l.b.WriteFenced(ctx, fence, []backend.Item{{Addr: AnchorAddr, Value: anchor}}); err != nil {
		return fmt.Errorf("durable: writing the anchor: %w", err)
	}
	if err := backend.Sync(ctx, l.b); err != nil { // the anchor, under backend.DeferSync
		return fmt.Errorf("durable: syncing the anchor: %w", err)
	}
	l.anchor = at
	return nil
}

// Append is machine 0's MachineLog.Append.
func (l *Log) Append(delta []byte, ops ...Op) uint64 { return l.Machine(0).Append(delta, ops...) }

// Sync waits until every record up to lsn is durable.
func (l *Log) Sync(lsn uint64) error {
	if l.j == nil {
		return nil
	}
	return l.j.Sync(lsn)
}

// Commit is machine 0's MachineLog.Commit.
func (l *Log) Commit(delta []byte, ops ...Op) (uint64, error) {
	return l.Machine(0).Commit(delta, ops...)
}

// Due is machine 0's MachineLog.Due.
func (l *Log) Due() bool { return l.Machine(0).Due() }

// Incarnation returns the store's incarnation (Journal.Incarnation),
// from which its fencing tokens come (FenceToken); 0 for a log that
// keeps nothing.
func (l *Log) Incarnation() uint64 {
	if l.j == nil {
		return 0
	}
	return l.j.Incarnation()
}

// Last returns the LSN of the last record appended, of any machine.
func (l *Log) Last() uint64 {
	if l.j == nil {
		return 0
	}
	return l.j.Last()
}

// Checkpoint is machine 0's MachineLog.Checkpoint.
func (l *Log) Checkpoint(ctx context.Context, state []byte, at uint64) error {
	return l.Machine(0).Checkpoint(ctx, state, at)
}

// Create starts the log of a new store, one machine whose initial layout
// is on storage and whose state is state: its checkpoint at the
// journal's last position (CreateMachines).
func (l *Log) Create(ctx context.Context, state []byte) error {
	return l.CreateMachines(ctx, map[MachineID][]byte{0: state})
}

// CreateMachines starts the log of a new store whose initial layout is
// on storage and whose machines' states are states: each one's
// checkpoint at the journal's last position. A journal left by a creation
// that never finished (checkpoints, and nothing after them) is
// overwritten; one holding any store's state is ErrForeign.
func (l *Log) CreateMachines(ctx context.Context, states map[MachineID][]byte) error {
	if l.j == nil {
		return nil
	}
	rec := l.recovery()
	var at uint64
	for _, cp := range rec.Checkpoints {
		at = max(at, cp.At)
	}
	if at > 0 || len(rec.Records) > 0 {
		return fmt.Errorf("%w (checkpoint at %d, %d records after it): is this the right storage for this data dir? To create a new store here, remove the journal", ErrForeign, at, len(rec.Records))
	}
	for _, m := range slices.Sorted(maps.Keys(states)) {
		if err := l.Machine(m).Checkpoint(ctx, states[m], l.j.Last()); err != nil {
			return err
		}
	}
	return nil
}

// recovery returns what the journal held when opened, taken from it once.
func (l *Log) recovery() Recovery {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rec == nil {
		rec := l.j.Recovered()
		l.rec = &rec
	}
	return *l.rec
}

// Checkpointed returns the machines whose checkpoints the journal held
// when opened, with their states: a protocol tells from them which
// machines its store has (an earlier build's store is machine 0).
func (l *Log) Checkpointed() map[MachineID][]byte {
	if l.j == nil {
		return nil
	}
	out := map[MachineID][]byte{}
	for m, cp := range l.recovery().Checkpoints {
		out[m] = cp.State
	}
	return out
}

// machineRecovery is what one machine recovers: the state of its latest
// checkpoint and its transitions after it.
type machineRecovery struct {
	state  []byte
	lsns   []uint64
	deltas [][]byte // the protocol's deltas of its records after it, in order
	ops    []Op
}

// recover reads every machine's checkpoint and records, and checks the
// anchor on storage: ErrLost without a checkpoint, ErrRollback when
// storage's anchor is older than some machine's checkpoint (or newer
// than the journal).
func (l *Log) recover(ctx context.Context) (map[MachineID]*machineRecovery, error) {
	if l.j == nil {
		return nil, ErrNoJournal
	}
	rec := l.recovery()
	if len(rec.Checkpoints) == 0 {
		return nil, ErrLost
	}
	out := map[MachineID]*machineRecovery{}
	var at uint64
	for m, cp := range rec.Checkpoints {
		out[m] = &machineRecovery{state: cp.State}
		at = max(at, cp.At)
	}
	anchor, err := l.checkAnchor(ctx, at, l.j.Last())
	if err != nil {
		return nil, err
	}
	for _, r := range rec.Records {
		mr := out[r.Machine]
		if mr == nil {
			return nil, fmt.Errorf("%w: machine %d has records and no checkpoint", ErrLost, r.Machine)
		}
		delta, ops, err := decode(r.Data)
		if err != nil {
			return nil, fmt.Errorf("durable: record %d of machine %d: %w", r.LSN, r.Machine, err)
		}
		mr.lsns = append(mr.lsns, r.LSN)
		mr.deltas = append(mr.deltas, delta)
		mr.ops = append(mr.ops, ops...)
	}
	l.anchor = anchor
	for m, mr := range out {
		ml := l.Machine(m)
		ml.mu.Lock()
		ml.since = mr.lsns
		ml.mu.Unlock()
	}
	return out, nil
}

// redo issues, in order, every backend operation the recovered records
// planned.
func (l *Log) redo(ctx context.Context, ops []Op) error {
	for i, op := range ops {
		var err error
		switch {
		case op.Items != nil:
			err = l.b.Write(ctx, op.Items)
		case op.Addrs != nil:
			err = l.b.Delete(ctx, op.Addrs)
		}
		if err != nil {
			return fmt.Errorf("durable: redoing backend operation %d of %d: %w", i+1, len(ops), err)
		}
	}
	return nil
}

// checkAnchor requires storage's anchor to lie between the checkpoint at
// and the journal's last record, and returns it: anything older is a
// rollback (a crash between the anchor and the checkpoint leaves it
// newer than at).
func (l *Log) checkAnchor(ctx context.Context, at, last uint64) (uint64, error) {
	got, ok, err := ReadAnchor(ctx, l.b, l.keys)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, fmt.Errorf("%w: its anchor is missing (the proxy's checkpoint is at journal position %d)", ErrRollback, at)
	}
	switch {
	case got < at:
		return 0, fmt.Errorf("%w: storage is at journal position %d, the proxy's checkpoint at %d", ErrRollback, got, at)
	case got > last:
		return 0, fmt.Errorf("%w: storage is at journal position %d, beyond the journal's last record %d (the journal lost records: a power loss under --fsync none?)", ErrRollback, got, last)
	default:
		return got, nil
	}
}

// ReadAnchor returns the journal position storage's anchor names, and
// false when storage holds no anchor.
func ReadAnchor(ctx context.Context, b backend.Backend, keys *seal.Keys) (uint64, bool, error) {
	vals, err := b.Read(ctx, []string{AnchorAddr})
	if err != nil {
		return 0, false, fmt.Errorf("durable: reading the anchor: %w", err)
	}
	if vals[0] == nil {
		return 0, false, nil
	}
	plain, err := keys.Open(nil, []byte(AnchorAddr), vals[0])
	if err != nil {
		return 0, false, fmt.Errorf("durable: the anchor: %w", err)
	}
	if len(plain) != 8 {
		return 0, false, fmt.Errorf("durable: the anchor: %w (malformed)", seal.ErrTampered)
	}
	return binary.BigEndian.Uint64(plain), true, nil
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
