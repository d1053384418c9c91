package slots

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/oblivkv/oblivkv/backend"
)

// change is one address's new value; none for a Delete.
type change struct {
	addr string
	v    value
}

// Write implements backend.Backend: the values go to free slots, then the
// index takes the whole batch at once. The batch's stripes are
// write-locked for the whole call.
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
	changes, err := b.place(items)
	if err != nil {
		return fmt.Errorf("slots: write: %w", err)
	}
	return b.commit(changes)
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

func addrsOf(items []backend.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Addr
	}
	return out
}

// place puts each value that does not fit the index in a free slot.
func (b *Backend) place(items []backend.Item) ([]change, error) {
	changes := make([]change, 0, len(items))
	for _, it := range items {
		v, err := b.store(it)
		if err != nil {
			b.cs.release(newSlots(changes))
			return nil, err
		}
		changes = append(changes, change{it.Addr, v})
	}
	return changes, nil
}

func (b *Backend) store(it backend.Item) (value, error) {
	if len(it.Value) <= inlineMax {
		return value{inline: append([]byte{}, it.Value...)}, nil
	}
	c, err := b.cs.of(slotSize(len(it.Value)))
	if err != nil {
		return value{}, err
	}
	slot, err := c.take()
	if err != nil {
		return value{}, err
	}
	l := loc{class: c.id, slot: slot, stamp: rand.Uint64()}
	if err := b.cs.write(l, it.Addr, it.Value); err != nil {
		c.release(l.slot)
		return value{}, err
	}
	return value{at: l}, nil
}

// newSlots returns the slots changes put values in.
func newSlots(changes []change) []loc {
	var out []loc
	for _, ch := range changes {
		if ch.v.at.valid() {
			out = append(out, ch.v.at)
		}
	}
	return out
}

// Delete implements backend.Backend.
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

// commit makes changes the index's: durably before it returns by
// default, or at the next sync point under NoSync or DeferSync.
func (b *Backend) commit(changes []change) error {
	if b.deferred.Load() {
		switch b.stage(changes) {
		case syncNow:
			return b.sync()
		case syncSoon:
			b.syncer.kick()
		}
		return nil
	}
	if len(newSlots(changes)) > 0 {
		if err := b.dataSync.do(b.cs.syncAll); err != nil {
			b.cs.release(newSlots(changes))
			return fmt.Errorf("slots: sync: %w", err)
		}
	}
	replaced, err := b.commitNow(changes)
	if err != nil {
		return fmt.Errorf("slots: commit: %w", err)
	}
	if err := b.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("slots: commit: %w", err)
	}
	b.cs.release(replaced)
	return nil
}

// commitNow commits changes to the index on disk and in memory, in the
// order of every other commit, and returns the slots they replaced, for
// the caller to free once the commit is synced.
func (b *Backend) commitNow(changes []change) ([]loc, error) {
	batch := b.db.NewBatch()
	defer batch.Close()
	for _, ch := range changes {
		if err := setEntry(batch, b.cs, ch.addr, ch.v); err != nil {
			b.cs.release(newSlots(changes))
			return nil, err
		}
	}
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	if err := batch.Commit(pebble.NoSync); err != nil {
		b.cs.release(newSlots(changes))
		return nil, err
	}
	b.counters.indexCommits.Add(1)
	return b.swap(changes), nil
}

// setEntry adds to batch the index entry of addr holding v (a delete for
// no value).
func setEntry(batch *pebble.Batch, cs *classes, addr string, v value) error {
	if v.inline == nil && !v.at.valid() {
		return batch.Delete([]byte(addr), nil)
	}
	return batch.Set([]byte(addr), v.encode(cs), nil)
}

// stage makes changes the in-memory index's, to reach disk at the next
// sync point, and says when that is due: soon (the background syncer's)
// once syncInterval has passed or enough changes or replaced slots wait,
// now (the caller's own) once far more replaced slots wait than the
// syncer keeps up with.
func (b *Backend) stage(changes []change) syncDue {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	b.pending = append(b.pending, b.swap(changes)...)
	for _, ch := range changes {
		b.dirty[ch.addr] = struct{}{}
	}
	switch {
	case len(b.pending) >= 4*maxPending:
		return syncNow
	case len(b.pending) >= maxPending || len(b.dirty) >= maxDirty || time.Since(b.synced) >= syncInterval:
		return syncSoon
	}
	return syncLater
}

type syncDue int

const (
	syncLater syncDue = iota
	syncSoon
	syncNow
)

// swap makes changes the in-memory index's, as one step for readers, and
// returns the slots they replaced. The caller holds commitMu.
func (b *Backend) swap(changes []change) []loc {
	var replaced []loc
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ch := range changes {
		if old, ok := b.idx.get(ch.addr); ok && old.at.valid() {
			replaced = append(replaced, old.at)
		}
		if ch.v.inline == nil && !ch.v.at.valid() {
			b.idx.del(ch.addr)
		} else {
			b.idx.put(ch.addr, ch.v)
		}
	}
	return replaced
}
