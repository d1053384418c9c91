package slots

import (
	"context"
	"fmt"
	"time"

	"github.com/oblivkv/oblivkv/backend"
)

// change is one address's new entry.
type change struct {
	addr string
	e    entry
}

// Write implements backend.Backend: the values go to free slots under one
// generation, then the index takes the whole batch at once.
func (b *Backend) Write(ctx context.Context, items []backend.Item) error {
	if err := b.enterWrite(ctx); err != nil {
		return err
	}
	defer b.life.RUnlock()
	items = lastWins(items)
	return b.locked(addrsOf(items), func() (uint64, error) { return b.write(items, nil) })
}

// locked runs a write with the stripes of addrs write-locked, then,
// unless syncs are deferred, waits for an fsync of the slot files that
// began after it (shared by the Writes waiting together). The stripes are
// released first: a Read may see a Write before it is durable (never
// before it is whole), and readers of its addresses do not wait for the
// fsync.
func (b *Backend) locked(addrs []string, write func() (gen uint64, err error)) error {
	set := b.stripes.of(addrs)
	b.stripes.lock(set)
	gen, err := write()
	b.stripes.unlock(set)
	if err != nil || gen == 0 || b.deferred.Load() {
		return err
	}
	if err := b.dataSync.do(b.cs.syncAll); err != nil {
		return fmt.Errorf("slots: sync: %w", err)
	}
	return nil
}

// Delete implements backend.Backend: a tombstone for each address that
// holds a value, written as Write writes values.
func (b *Backend) Delete(ctx context.Context, addrs []string) error {
	if err := b.enterWrite(ctx); err != nil {
		return err
	}
	defer b.life.RUnlock()
	return b.locked(addrs, func() (uint64, error) {
		var held []string
		seen := map[string]bool{}
		b.mu.RLock()
		for _, a := range addrs {
			if e, ok := b.idx.get(a); ok && !e.tomb && !seen[a] {
				held = append(held, a)
			}
			seen[a] = true
		}
		b.mu.RUnlock()
		return b.write(nil, held)
	})
}

// write writes items and tombstones for dead, distinct addresses whose
// stripes the caller holds, and returns the Write's generation (0 for
// nothing written).
func (b *Backend) write(items []backend.Item, dead []string) (uint64, error) {
	for _, it := range items {
		if len(it.Addr) > maxAddrLen {
			return 0, fmt.Errorf("slots: an address of %d bytes (at most %d)", len(it.Addr), maxAddrLen)
		}
	}
	if len(items)+len(dead) == 0 {
		return 0, nil
	}
	batch := uint32(len(items) + len(dead))
	if !b.deferred.Load() {
		batch |= acked
	}
	gen := b.begin()
	changes, err := b.place(gen, batch, items, dead)
	if err != nil {
		b.finish(gen, nil)
		return 0, fmt.Errorf("slots: write: %w", err)
	}
	switch b.finish(gen, changes) {
	case syncNow:
		return gen, b.sync()
	case syncSoon:
		b.syncer.kick()
	}
	return gen, nil
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

// place puts each value, and each tombstone, in a free slot.
func (b *Backend) place(gen uint64, batch uint32, items []backend.Item, dead []string) ([]change, error) {
	changes := make([]change, 0, len(items)+len(dead))
	put := func(addr string, v []byte, tomb bool) error {
		at, err := b.store(gen, batch, addr, v, tomb)
		if err == nil {
			changes = append(changes, change{addr, entry{at: at, tomb: tomb}})
		}
		return err
	}
	var err error
	for i := 0; i < len(items) && err == nil; i++ {
		err = put(items[i].Addr, items[i].Value, false)
	}
	for i := 0; i < len(dead) && err == nil; i++ {
		err = put(dead[i], nil, true)
	}
	if err != nil {
		placed := make([]loc, len(changes))
		for i, ch := range changes {
			placed[i] = ch.e.at
		}
		b.cs.release(placed)
		return nil, err
	}
	return changes, nil
}

// store writes one slot.
func (b *Backend) store(gen uint64, batch uint32, addr string, v []byte, tomb bool) (loc, error) {
	c, err := b.cs.of(slotSize(len(addr), len(v)))
	if err != nil {
		return loc{}, err
	}
	slot, err := c.take()
	if err != nil {
		return loc{}, err
	}
	at := loc{class: c.id, slot: slot, gen: gen}
	if err := b.cs.write(at, addr, v, tomb, batch); err != nil {
		c.release(slot)
		return loc{}, err
	}
	return at, nil
}

// begin starts a Write: its generation, under way until finish.
func (b *Backend) begin() uint64 {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	gen := b.nextGen
	b.nextGen++
	b.inflight[gen] = struct{}{}
	return gen
}

// finish makes changes the index's, as one step for readers, ends the
// Write of generation gen, and says when a sync point is due (see
// syncDue).
func (b *Backend) finish(gen uint64, changes []change) syncDue {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	b.mu.Lock()
	for _, ch := range changes {
		if old, had := b.idx.put(ch.addr, ch.e); had {
			b.pending = append(b.pending, replaced{old.at, gen})
		}
	}
	b.mu.Unlock()
	delete(b.inflight, gen)
	b.finished.Broadcast()
	switch {
	case len(b.pending) >= 4*maxPending:
		return syncNow
	case len(b.pending) >= maxPending || time.Since(b.synced) >= syncInterval:
		return syncSoon
	}
	return syncLater
}

// syncDue is when a Write calls for a sync point: later, soon (the
// background syncer's), or now (its own, once the syncer falls far
// behind).
type syncDue int

const (
	syncLater syncDue = iota
	syncSoon
	syncNow
)
