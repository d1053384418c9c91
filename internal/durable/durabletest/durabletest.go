// Package durabletest checks what storage sees of a recovery from a
// journal (package durable): a Witness storage that tells whether the
// Writes a recovery makes are ones it took before, and a check of the
// shape of a recovery's calls. It is for tests only, and must never
// depend on a protocol.
package durabletest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/observe"
)

// Witness is storage that remembers every Write it took, addresses and
// values, and counts the Writes made while Recovering that it never took
// before: a recovery that only redoes journaled Writes makes none.
type Witness struct {
	backend.Backend
	mu         sync.Mutex
	seen       map[string]bool
	recovering atomic.Bool
	novel      atomic.Int64
}

// NewWitness returns a Witness over b.
func NewWitness(b backend.Backend) *Witness {
	return &Witness{Backend: b, seen: map[string]bool{}}
}

// Recovering marks the Writes from now on as a recovery's (on) or not.
func (w *Witness) Recovering(on bool) { w.recovering.Store(on) }

// Novel is the number of Writes made while recovering that storage had
// not seen before.
func (w *Witness) Novel() int64 { return w.novel.Load() }

func (w *Witness) Write(ctx context.Context, items []backend.Item) error {
	var b strings.Builder
	for _, it := range items {
		if it.Addr == durable.AnchorAddr {
			return w.Backend.Write(ctx, items) // new at every checkpoint
		}
		fmt.Fprintf(&b, "%q=%x;", it.Addr, it.Value)
	}
	w.mu.Lock()
	if w.recovering.Load() && !w.seen[b.String()] {
		w.novel.Add(1)
	}
	w.seen[b.String()] = true
	w.mu.Unlock()
	return w.Backend.Write(ctx, items)
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
	if !IsAnchorWrite(last) {
		return fmt.Errorf("recovery: last call %v of %v; want the checkpoint's anchor", last.Op, last.Addrs)
	}
	for _, r := range recovery[1 : len(recovery)-1] {
		if r.Op != observe.OpWrite || IsAnchorWrite(r) {
			return fmt.Errorf("recovery: call %d is a %v of %d addresses; want only the journal's Writes", r.Seq, r.Op, len(r.Addrs))
		}
	}
	return nil
}

// IsAnchorWrite reports whether r is a checkpoint's write of the anchor.
func IsAnchorWrite(r observe.Record) bool {
	return r.Op == observe.OpWrite && len(r.Addrs) == 1 && r.Addrs[0] == durable.AnchorAddr
}

// Crasher is what CutAfterRead stops: a journal whose Crash ends it as
// the death of its process would (internal/journal.Journal).
type Crasher interface{ Crash() }

// CutAfterRead is storage whose next Read, once armed, reaches storage
// and then is cut off from its store: with Crash, the journal dies (the
// process was killed after the Read left it); with Fail, the Read is
// reported failed although storage served it.
type CutAfterRead struct {
	backend.Backend
	mu    sync.Mutex
	crash Crasher
	fail  bool
}

// Crash arms the next Read to crash j once storage has served it.
func (b *CutAfterRead) Crash(j Crasher) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.crash = j
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
		b.crash.Crash()
		b.crash = nil
	case b.fail:
		b.fail = false
		return nil, errors.New("durabletest: injected failure of a Read storage served")
	}
	return vals, err
}
