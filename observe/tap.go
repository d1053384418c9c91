// Package observe records the adversary's view of a store: the sequence of
// backend calls. A Tap wraps any backend.Backend; its counters are always
// on, and a full log (one Record per call) goes to a Sink when one is given:
// a file in the binary format of this package, or memory in tests.
//
// The Tap sees only what the storage operator sees (addresses, operation,
// sizes, timing); it must never be handed plaintext, logical keys or key
// material, and it must never change the calls it forwards.
package observe

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oblivkv/oblivkv/backend"
)

// Op is the kind of a backend call.
type Op uint8

// The backend calls a Tap records.
const (
	OpRead Op = iota + 1
	OpWrite
	OpDelete
	OpScan
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpDelete:
		return "delete"
	case OpScan:
		return "scan"
	}
	return "unknown"
}

// Record is one backend call as the storage operator sees it.
type Record struct {
	Seq   uint64        // position in the sequence of calls, from 1
	Start time.Duration // monotonic time of the call since the Tap was made
	Took  time.Duration // how long the call took
	Op    Op
	Addrs []string // addresses, in call order (for a scan: the prefix)
	Sizes []int    // bytes per address: read or written (0 for deletes)
	Err   bool     // the call failed
	// Fence is the fence's key of a fenced write (backend.Fence), where
	// storage also writes Token (backend.TokenSize bytes) when it accepts
	// the write; "" for every other call. Addrs and Sizes hold the
	// write's items only, so a fenced write reads as the Write it is.
	Fence string
	Token uint64
}

// Sink receives every Record of a Tap. Calls to Record are serialised by
// the Tap, in sequence order.
type Sink interface {
	Record(r Record) error
}

// Counters are the always-on totals of a Tap.
type Counters struct {
	Calls        uint64 // backend round trips
	Reads        uint64 // read calls
	Writes       uint64 // write calls
	Deletes      uint64 // delete calls
	AddrsRead    uint64
	AddrsWritten uint64
	AddrsDeleted uint64
	BytesRead    uint64
	BytesWritten uint64
	Errors       uint64
}

// Bytes is the total payload moved in either direction.
func (c Counters) Bytes() uint64 { return c.BytesRead + c.BytesWritten }

// Add returns c + o, field by field.
func (c Counters) Add(o Counters) Counters {
	return Counters{
		Calls: c.Calls + o.Calls, Reads: c.Reads + o.Reads, Writes: c.Writes + o.Writes,
		Deletes: c.Deletes + o.Deletes, AddrsRead: c.AddrsRead + o.AddrsRead,
		AddrsWritten: c.AddrsWritten + o.AddrsWritten, AddrsDeleted: c.AddrsDeleted + o.AddrsDeleted,
		BytesRead: c.BytesRead + o.BytesRead, BytesWritten: c.BytesWritten + o.BytesWritten,
		Errors: c.Errors + o.Errors,
	}
}

// Sub returns c - o, field by field.
func (c Counters) Sub(o Counters) Counters {
	return Counters{
		Calls: c.Calls - o.Calls, Reads: c.Reads - o.Reads, Writes: c.Writes - o.Writes,
		Deletes: c.Deletes - o.Deletes, AddrsRead: c.AddrsRead - o.AddrsRead,
		AddrsWritten: c.AddrsWritten - o.AddrsWritten, AddrsDeleted: c.AddrsDeleted - o.AddrsDeleted,
		BytesRead: c.BytesRead - o.BytesRead, BytesWritten: c.BytesWritten - o.BytesWritten,
		Errors: c.Errors - o.Errors,
	}
}

// Tap is a backend.Backend that forwards every call to the wrapped backend
// and records it.
type Tap struct {
	next  backend.Backend
	epoch time.Time

	calls, reads, writes, deletes        atomic.Uint64
	addrsRead, addrsWritten, addrsDelete atomic.Uint64
	bytesRead, bytesWritten, errs        atomic.Uint64

	mu      sync.Mutex // orders Seq assignment and Sink calls
	seq     uint64
	sink    Sink
	sinkErr error
}

// NewTap wraps next. sink may be nil: counters only. A sink with a
// SetOrigin method (FileLog) is told the wall-clock time the records'
// Start durations count from.
func NewTap(next backend.Backend, sink Sink) *Tap {
	t := &Tap{next: next, epoch: time.Now(), sink: sink}
	if o, ok := sink.(interface{ SetOrigin(time.Time) error }); ok {
		t.sinkErr = o.SetOrigin(t.epoch)
	}
	return t
}

// Counters returns a snapshot of the totals so far.
func (t *Tap) Counters() Counters {
	return Counters{
		Calls: t.calls.Load(), Reads: t.reads.Load(), Writes: t.writes.Load(),
		Deletes: t.deletes.Load(), AddrsRead: t.addrsRead.Load(),
		AddrsWritten: t.addrsWritten.Load(), AddrsDeleted: t.addrsDelete.Load(),
		BytesRead: t.bytesRead.Load(), BytesWritten: t.bytesWritten.Load(), Errors: t.errs.Load(),
	}
}

// SinkErr returns the first error the Sink returned, if any. A failing sink
// never fails the backend call it records.
func (t *Tap) SinkErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sinkErr
}

// record counts a call that began at start and hands r, its Seq, times
// and Err filled in, to the sink.
func (t *Tap) record(start time.Time, r Record, err error) {
	t.calls.Add(1)
	if err != nil {
		t.errs.Add(1)
	}
	if t.sink == nil {
		return
	}
	r.Start, r.Took, r.Err = start.Sub(t.epoch), time.Since(start), err != nil
	t.mu.Lock()
	t.seq++
	r.Seq = t.seq
	if serr := t.sink.Record(r); serr != nil && t.sinkErr == nil {
		t.sinkErr = serr
	}
	t.mu.Unlock()
}

// Read implements backend.Backend.
func (t *Tap) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	start := time.Now()
	vals, err := t.next.Read(ctx, addrs)
	t.read(start, addrs, vals, err)
	return vals, err
}

// read counts and records a read of addrs that returned vals.
func (t *Tap) read(start time.Time, addrs []string, vals [][]byte, err error) {
	t.reads.Add(1)
	t.addrsRead.Add(uint64(len(addrs)))
	var sizes []int
	if t.sink != nil {
		sizes = make([]int, len(addrs))
	}
	var n int
	for i, v := range vals {
		n += len(v)
		if sizes != nil && i < len(sizes) {
			sizes[i] = len(v)
		}
	}
	t.bytesRead.Add(uint64(n))
	t.record(start, Record{Op: OpRead, Addrs: t.keep(addrs), Sizes: sizes}, err)
}

// Write implements backend.Backend.
func (t *Tap) Write(ctx context.Context, items []backend.Item) error {
	start := time.Now()
	err := t.next.Write(ctx, items)
	t.wrote(start, backend.Fence{}, len(items), func(i int) (string, int) { return items[i].Addr, len(items[i].Value) }, err)
	return err
}

// WriteFenced implements backend.Backend. To the storage operator it is
// a write of the items and the token; the log records it as the items'
// write with the fence beside them (Record.Fence).
func (t *Tap) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	start := time.Now()
	err := t.next.WriteFenced(ctx, f, items)
	t.wroteFenced(start, f, items, err)
	return err
}

// Pipeline implements backend.Pipeliner. To the storage operator it is a
// write (when there are items) and then each read, and the log records
// them so.
func (t *Tap) Pipeline(ctx context.Context, items []backend.Item, reads [][]string) ([][][]byte, error) {
	if _, ok := t.next.(backend.Pipeliner); !ok { // separate calls: each recorded as it ends
		return backend.Pipeline(ctx, tapCalls{t}, items, reads)
	}
	start := time.Now()
	vals, err := backend.Pipeline(ctx, t.next, items, reads)
	if len(items) > 0 {
		t.wrote(start, backend.Fence{}, len(items), func(i int) (string, int) { return items[i].Addr, len(items[i].Value) }, err)
	}
	t.readAll(start, reads, vals, err)
	return vals, err
}

// PipelineFenced implements backend.Pipeliner: to the storage operator a
// fenced write (WriteFenced) and then each read, and the log records them
// so. A refused write fails the reads with it.
func (t *Tap) PipelineFenced(ctx context.Context, f backend.Fence, items []backend.Item, reads [][]string) ([][][]byte, error) {
	if f.Unfenced() {
		return t.Pipeline(ctx, items, reads)
	}
	if _, ok := t.next.(backend.Pipeliner); !ok { // separate calls: each recorded as it ends
		return backend.PipelineFenced(ctx, tapCalls{t}, f, items, reads)
	}
	start := time.Now()
	vals, err := backend.PipelineFenced(ctx, t.next, f, items, reads)
	t.wroteFenced(start, f, items, err)
	t.readAll(start, reads, vals, err)
	return vals, err
}

// readAll counts and records the reads of a pipeline.
func (t *Tap) readAll(start time.Time, reads [][]string, vals [][][]byte, err error) {
	for i, addrs := range reads {
		var v [][]byte
		if err == nil {
			v = vals[i]
		}
		t.read(start, addrs, v, err)
	}
}

// tapCalls is a Tap that is no backend.Pipeliner (its Pipeline method,
// of another signature, hides the Tap's): backend.Pipeline issues a
// pipeline through it as the Tap's own calls, each recorded.
type tapCalls struct{ *Tap }

func (tapCalls) Pipeline() {}

// WriteVersioned implements backend.Backend. To the storage operator it
// is a write; the log records it as one, with the stored sizes.
func (t *Tap) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	start := time.Now()
	stale, err := t.next.WriteVersioned(ctx, items)
	t.wrote(start, backend.Fence{}, len(items), func(i int) (string, int) {
		return items[i].Addr, backend.VersionSize + len(items[i].Value)
	}, err)
	return stale, err
}

// wroteFenced counts and records a fenced write of items; an unfenced
// one is a Write.
func (t *Tap) wroteFenced(start time.Time, f backend.Fence, items []backend.Item, err error) {
	if !f.Unfenced() {
		t.addrsWritten.Add(1)
		t.bytesWritten.Add(backend.TokenSize)
	}
	t.wrote(start, f, len(items), func(i int) (string, int) { return items[i].Addr, len(items[i].Value) }, err)
}

// wrote counts and records a write of n items, fenced by f unless it is
// the zero Fence; item(i) gives the i-th address and stored size.
func (t *Tap) wrote(start time.Time, f backend.Fence, n int, item func(i int) (string, int), err error) {
	t.writes.Add(1)
	t.addrsWritten.Add(uint64(n))
	var addrs []string
	var sizes []int
	if t.sink != nil {
		addrs, sizes = make([]string, n), make([]int, n)
	}
	total := 0
	for i := range n {
		addr, size := item(i)
		total += size
		if addrs != nil {
			addrs[i], sizes[i] = addr, size
		}
	}
	t.bytesWritten.Add(uint64(total))
	t.record(start, Record{Op: OpWrite, Addrs: addrs, Sizes: sizes, Fence: f.Key, Token: f.Token}, err)
}

// Delete implements backend.Backend.
func (t *Tap) Delete(ctx context.Context, addrs []string) error {
	start := time.Now()
	err := t.next.Delete(ctx, addrs)
	t.deletes.Add(1)
	t.addrsDelete.Add(uint64(len(addrs)))
	var sizes []int
	if t.sink != nil {
		sizes = make([]int, len(addrs))
	}
	t.record(start, Record{Op: OpDelete, Addrs: t.keep(addrs), Sizes: sizes}, err)
	return err
}

// Scan implements backend.Backend.
func (t *Tap) Scan(ctx context.Context, prefix string, fn func(addr string) error) error {
	start := time.Now()
	err := t.next.Scan(ctx, prefix, fn)
	t.record(start, Record{Op: OpScan, Addrs: t.keep([]string{prefix}), Sizes: []int{0}}, err)
	return err
}

// Sync forwards to the wrapped backend (backend.Syncer). It is not a call
// storage answers, so the log does not record it.
func (t *Tap) Sync(ctx context.Context) error { return backend.Sync(ctx, t.next) }

// DeferSync forwards to the wrapped backend (backend.SyncDeferrer).
func (t *Tap) DeferSync() bool { return backend.DeferSync(t.next) }

// Close implements backend.Backend.
func (t *Tap) Close() error { return t.next.Close() }

// keep copies addrs for the log when there is a sink, since callers may
// reuse their slices.
func (t *Tap) keep(addrs []string) []string {
	if t.sink == nil {
		return nil
	}
	return append([]string(nil), addrs...)
}
