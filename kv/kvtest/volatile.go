package kvtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
)

// Volatile is memory storage that, once told to defer its syncs
// (backend.DeferSync), keeps only what was written before its last Sync
// when the power goes (PowerLoss): a disk backend without per-write
// fsync, under a power cut.
type Volatile struct {
	*mem.Backend

	mu       sync.Mutex
	deferred bool
	undo     []undoEntry // the previous value of each address written since the last Sync, oldest first
	calls    int         // deferred writes so far
}

type undoEntry struct {
	addr string
	prev []byte // nil: the address held nothing
	call int    // which call wrote it, counted from 1
}

// NewVolatile returns empty Volatile storage.
func NewVolatile() *Volatile { return &Volatile{Backend: mem.New()} }

// DeferSync implements backend.SyncDeferrer.
func (v *Volatile) DeferSync() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.deferred = true
	return true
}

// Unsynced reports how many addresses were written since the last Sync:
// what a PowerLoss now would revert.
func (v *Volatile) Unsynced() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.undo)
}

// Deferred reports whether DeferSync was called.
func (v *Volatile) Deferred() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.deferred
}

// Sync implements backend.Syncer: everything written so far survives a
// power loss.
func (v *Volatile) Sync(context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.undo = nil
	return nil
}

func (v *Volatile) Write(ctx context.Context, items []backend.Item) error {
	addrs := make([]string, len(items))
	for i, it := range items {
		addrs[i] = it.Addr
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.remember(ctx, addrs); err != nil {
		return err
	}
	return v.Backend.Write(ctx, items)
}

func (v *Volatile) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	addrs := make([]string, 0, len(items)+1)
	for _, it := range items {
		addrs = append(addrs, it.Addr)
	}
	if !f.Unfenced() {
		addrs = append(addrs, f.Key)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.remember(ctx, addrs); err != nil {
		return err
	}
	return v.Backend.WriteFenced(ctx, f, items)
}

func (v *Volatile) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	addrs := make([]string, len(items))
	for i, it := range items {
		addrs[i] = it.Addr
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.remember(ctx, addrs); err != nil {
		return 0, err
	}
	return v.Backend.WriteVersioned(ctx, items)
}

func (v *Volatile) Delete(ctx context.Context, addrs []string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.remember(ctx, addrs); err != nil {
		return err
	}
	return v.Backend.Delete(ctx, addrs)
}

// remember records the values addrs hold before a deferred write; v.mu is
// held.
func (v *Volatile) remember(ctx context.Context, addrs []string) error {
	if !v.deferred {
		return nil
	}
	prev, err := v.Backend.Read(ctx, addrs)
	if err != nil {
		return err
	}
	v.calls++
	for i, a := range addrs {
		v.undo = append(v.undo, undoEntry{addr: a, prev: prev[i], call: v.calls})
	}
	return nil
}

// PowerLoss reverts every write since the last Sync and reopens the
// storage, and returns how many addresses it reverted.
func (v *Volatile) PowerLoss(ctx context.Context) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.Backend.Reopen()
	for i := len(v.undo) - 1; i >= 0; i-- {
		u := v.undo[i]
		var err error
		if u.prev == nil {
			err = v.Backend.Delete(ctx, []string{u.addr})
		} else {
			err = v.Backend.Write(ctx, []backend.Item{{Addr: u.addr, Value: u.prev}})
		}
		if err != nil {
			return 0, err
		}
	}
	n := len(v.undo)
	v.undo = nil
	return n, nil
}

// PrefixPowerLoss is PowerLoss on storage that made the first half of
// the calls since the last Sync durable on its own, as the disk backend's
// slots engine does at the sync points it passes between two Syncs: what
// survives is still a prefix of the writes, whole, but a later one than
// the last Sync. It returns how many addresses it reverted.
func (v *Volatile) PrefixPowerLoss(ctx context.Context) (int, error) {
	v.mu.Lock()
	if n := len(v.undo); n > 0 {
		first, last := v.undo[0].call, v.undo[n-1].call
		keep := first + (last-first+1)/2
		i := slices.IndexFunc(v.undo, func(u undoEntry) bool { return u.call >= keep })
		v.undo = v.undo[i:]
	}
	v.mu.Unlock()
	return v.PowerLoss(ctx)
}

// CheckPowerLoss shows that a store that journals every write
// (kv.WriteJournaler) loses nothing acknowledged to a power cut while its
// storage skips per-write syncs (backend.DeferSync, as kv.Open sets it).
// open is the protocol's factory; env gives the store's capacity, value
// size and options, and CheckPowerLoss adds storage, keys and a journal.
// Writes and deletes are acknowledged, the process dies (the journal
// keeps what it synced), storage loses what it had not synced (all of it,
// or in the "prefix" run the later half: Volatile.PrefixPowerLoss),
// and every key must read back as last acknowledged, and a store that
// names its keys (kv.KeyLister) must name exactly those stored.
func CheckPowerLoss(t *testing.T, open kv.Factory, env kv.Env) {
	t.Helper()
	t.Run("reverted", func(t *testing.T) { checkPowerLoss(t, open, env, (*Volatile).PowerLoss) })
	t.Run("prefix", func(t *testing.T) { checkPowerLoss(t, open, env, (*Volatile).PrefixPowerLoss) })
}

func checkPowerLoss(t *testing.T, open kv.Factory, env kv.Env, powerLoss func(*Volatile, context.Context) (int, error)) {
	t.Helper()
	ctx, v := t.Context(), NewVolatile()
	env.Backend = v
	p := newProcess(t, open, env)
	s, j := p.start(true)
	if w, ok := s.(kv.WriteJournaler); !ok || !w.JournalsEveryWrite() {
		t.Fatal("the store does not journal every write: its storage must sync each one")
	}
	backend.DeferSync(v)
	want := Model{}
	for round := range 3 {
		for i := range 24 {
			want.Put(t, s, fmt.Sprint("k", i), fmt.Sprint("v", round, ".", i))
		}
		for i := round; i < 24; i += 7 {
			want.Delete(t, s, fmt.Sprint("k", i))
		}
	}
	// A store that checkpoints often may have synced everything: write on
	// until storage holds a write it has not synced.
	for i := 0; v.Unsynced() == 0; i++ {
		if i == 1000 {
			t.Fatal("storage was synced after every write: a power loss would exercise nothing")
		}
		want.Put(t, s, fmt.Sprint("k", i%24), fmt.Sprint("extra", i))
	}
	j.Crash() // the process dies: nothing more reaches the journal
	s.Close()
	lost, err := powerLoss(v, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lost == 0 {
		t.Fatal("the power loss reverted no write: the test exercised nothing")
	}
	s, j = p.start(false)
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		j.Close()
	}()
	when := fmt.Sprintf("after a power loss that reverted %d writes", lost)
	want.Check(t, s, when)
	want.CheckNames(t, s, when)
}
