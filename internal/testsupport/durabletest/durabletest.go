// Package durabletest checks what storage sees of a recovery from a
// journal (package durable): a Witness storage that tells whether the
// Writes a recovery makes are ones it took before, a check of the shape
// of a recovery's calls, AnchorHolding, storage that holds a
// checkpoint's anchor write while a test acts, and HeldSyncs, a journal
// whose Syncs a test counts and holds. It is for tests only, and
// must never depend on a protocol.
package durabletest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
)

// Witness is storage that remembers every Write it took, addresses and
// values, and counts the Writes made while Recovering that it never took
// before: a recovery that only redoes journaled Writes makes none.
type Witness struct {
	backend.Backend
	mu         sync.Mutex
	seen       map[[sha256.Size]byte]bool // by the digest of a Write's length-prefixed addresses and values
	recovering atomic.Bool
	novel      atomic.Int64
}

// NewWitness returns a Witness over b.
func NewWitness(b backend.Backend) *Witness {
	return &Witness{Backend: b, seen: map[[sha256.Size]byte]bool{}}
}

// Recovering marks the Writes from now on as a recovery's (on) or not.
func (w *Witness) Recovering(on bool) { w.recovering.Store(on) }

// Novel is the number of Writes made while recovering that storage had
// not seen before.
func (w *Witness) Novel() int64 { return w.novel.Load() }

func (w *Witness) Write(ctx context.Context, items []backend.Item) error {
	w.take(items)
	return w.Backend.Write(ctx, items)
}

// WriteFenced is taken as Write is: the items, not the fence's token (a
// redone Write carries the token of the process that redoes it).
func (w *Witness) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	w.take(items)
	return w.Backend.WriteFenced(ctx, f, items)
}

// take remembers the Write of items, counting it if it is a recovery's
// and new; an anchor's Write is new at every checkpoint, and not taken.
func (w *Witness) take(items []backend.Item) {
	h := sha256.New()
	var n [8]byte
	for _, it := range items {
		if it.Addr == durable.AnchorAddr {
			return
		}
		for _, field := range [][]byte{[]byte(it.Addr), it.Value} {
			h.Write(binary.LittleEndian.AppendUint64(n[:0], uint64(len(field))))
			h.Write(field)
		}
	}
	var write [sha256.Size]byte
	h.Sum(write[:0])
	w.mu.Lock()
	if w.recovering.Load() && !w.seen[write] {
		w.novel.Add(1)
	}
	w.seen[write] = true
	w.mu.Unlock()
}

// CheckRecoveryView checks storage's view of a recovery from a journal
// (internal/durable): the anchor read, then only Writes (the journal's
// redone Writes; a Witness tells whether storage saw each before), then
// the anchor of the checkpoint that ends recovery. Anything else, a Read
// above all, would show storage something of the trusted state.
func CheckRecoveryView(recovery []observe.Record) error {
	if len(recovery) < 2 {
		return fmt.Errorf("recovery: storage saw %d calls; want at least the anchor's read and write", len(recovery))
	}
	first, last := recovery[0], recovery[len(recovery)-1]
	if first.Op != observe.OpRead || !slices.Equal(first.Addrs, []string{durable.AnchorAddr}) {
		return fmt.Errorf("recovery: first call %v of %v; want a read of the anchor", first.Op, first.Addrs)
	}
	if !durable.IsAnchorWrite(last) {
		return fmt.Errorf("recovery: last call %v of %v; want the checkpoint's anchor", last.Op, last.Addrs)
	}
	for _, r := range recovery[1 : len(recovery)-1] {
		if r.Op != observe.OpWrite || durable.IsAnchorWrite(r) {
			return fmt.Errorf("recovery: call %d is a %v of %d addresses; want only the journal's Writes", r.Seq, r.Op, len(r.Addrs))
		}
	}
	return nil
}

// Crasher is what CutAfterRead stops: a journal whose Crash ends it as
// the death of its process would (internal/durable/journal.Journal).
type Crasher interface{ Crash() }

// CutAfterRead is storage whose next Read, once armed, reaches storage
// and then is cut off from its store: with Crash, the journal dies (the
// process was killed after the Read left it); with Fail, the Read is
// reported failed although storage served it.
type CutAfterRead struct {
	backend.Backend
	mu    sync.Mutex
	crash Crasher
	reads int // Reads left before the crash
	fail  bool
}

// Crash arms the next Read to crash j once storage has served it.
func (b *CutAfterRead) Crash(j Crasher) { b.CrashAfter(1, j) }

// CrashAfter arms the n-th Read from now to crash j once storage has
// served it.
func (b *CutAfterRead) CrashAfter(n int, j Crasher) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.crash, b.reads = j, n
}

// Fail arms the next Read to be reported failed once storage has served
// it.
func (b *CutAfterRead) Fail() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = true
}

// Read implements backend.Backend.
func (b *CutAfterRead) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	vals, err := b.Backend.Read(ctx, addrs)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.crash != nil:
		if b.reads--; b.reads == 0 {
			b.crash.Crash()
			b.crash = nil
		}
	case b.fail:
		b.fail = false
		return nil, errors.New("durabletest: injected failure of a Read storage served")
	}
	return vals, err
}

// ErrReadAgain is the leak a Read cut short can leave: the key's next
// access reads the addresses storage saw read when the crash came, so
// storage links the two accesses.
var ErrReadAgain = errors.New("the key's next access reads the path cut short again")

// MidRead is storage's view around a Read a crash cut short: the Read,
// the Reads and Writes of the recovery after it, and the calls of the
// key's next access; tree Reads are those of addresses under Prefix.
type MidRead struct {
	Prefix         string
	Cut            observe.Record
	Recovery, Next []observe.Record
}

// CrashMidRead opens a journaled store with open (over memory storage
// recorded by a Tap, 256 keys of 16 bytes), fills it with keys k0..k19,
// crashes it once storage has served the tree Read of a Get of k3,
// reopens it from its journal and reads k3 back. Tree addresses are those
// under prefix.
func CrashMidRead(t *testing.T, prefix string, open func(kv.Env) (kv.Store, error)) MidRead {
	t.Helper()
	keys, dir, log, m := kvtest.NewKeys(t), t.TempDir(), &observe.MemoryLog{}, mem.New()
	b := &CutAfterRead{Backend: m}
	reopen := func(fresh bool) (kv.Store, *journal.Journal) {
		t.Helper()
		j, err := journal.Open(dir, keys, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m.Reopen() // the crashed store closed it
		s, err := open(kv.Env{Backend: observe.NewTap(b, log), Keys: keys, Capacity: 256, ValueSize: 16, Fresh: fresh, Journal: j})
		if err != nil {
			j.Crash()
			t.Fatal(err)
		}
		return s, j
	}
	s, j := reopen(true)
	for i := range 20 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	b.Crash(j)
	if _, _, err := s.Get(t.Context(), "k3"); err == nil {
		t.Fatal("a Get cut short by a crash succeeded")
	}
	v := MidRead{Prefix: prefix}
	if reads := v.treeReads(log.Records()); len(reads) > 0 {
		v.Cut = reads[len(reads)-1]
	}
	s.Close()
	j.Crash()
	from := len(log.Records())
	s, j = reopen(false)
	t.Cleanup(func() { s.Close(); j.Close() })
	v.Recovery = slices.Clone(log.Records()[from:])
	from = len(log.Records())
	if got, ok, err := s.Get(t.Context(), "k3"); err != nil || !ok || string(got) != "v" {
		t.Fatalf("Get after recovery = %q, %v, %v", got, ok, err)
	}
	v.Next = slices.Clone(log.Records()[from:])
	return v
}

// Check requires that recovery read the cut addresses once, identically,
// and wrote them all afterwards (the access finished, its block moved),
// and that the key's next access read others (else ErrReadAgain).
func (v MidRead) Check() error {
	var errs []error
	reads := v.treeReads(v.Recovery)
	if len(reads) != 1 || !slices.Equal(reads[0].Addrs, v.Cut.Addrs) {
		errs = append(errs, fmt.Errorf("recovery made %d Reads of the tree; want one, of the Read cut short", len(reads)))
	} else if !v.writtenAfter(reads[0].Seq) {
		errs = append(errs, errors.New("recovery did not write the path it read again"))
	}
	switch next := v.treeReads(v.Next); {
	case len(next) != 1:
		errs = append(errs, fmt.Errorf("the key's next access made %d Reads of the tree", len(next)))
	case slices.Equal(next[0].Addrs, v.Cut.Addrs):
		errs = append(errs, ErrReadAgain)
	}
	return errors.Join(errs...)
}

// treeReads returns the Reads of addresses under the prefix among recs.
func (v MidRead) treeReads(recs []observe.Record) []observe.Record {
	return slices.DeleteFunc(slices.Clone(recs), func(r observe.Record) bool {
		return r.Op != observe.OpRead || !strings.HasPrefix(r.Addrs[0], v.Prefix)
	})
}

// writtenAfter reports whether the recovery's Writes after call seq hold
// every address of the cut Read.
func (v MidRead) writtenAfter(seq uint64) bool {
	written := map[string]bool{}
	for _, r := range v.Recovery {
		if r.Op == observe.OpWrite && r.Seq > seq {
			for _, a := range r.Addrs {
				written[a] = true
			}
		}
	}
	return !slices.ContainsFunc(v.Cut.Addrs, func(a string) bool { return !written[a] })
}
