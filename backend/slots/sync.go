package slots

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"
)

// Sync makes every Write and Delete that returned durable
// (backend.Syncer): a sync point.
func (b *Backend) Sync(ctx context.Context) error {
	if err := b.enterWrite(ctx); err != nil {
		return err
	}
	defer b.life.RUnlock()
	return b.sync()
}

// sync passes a sync point: it takes the entries changed since the last
// one, fsyncs the slots (which hold every value those entries name, since
// a value is written before its entry changes), commits the entries as
// one fsynced batch, then frees the slots they replaced. Writes go on
// meanwhile; what they change waits for the next sync point.
func (b *Backend) sync() error {
	b.syncMu.Lock()
	defer b.syncMu.Unlock()
	batch := b.db.NewBatch()
	defer batch.Close()
	b.commitMu.Lock()
	dirty, replaced := b.dirty, b.pending
	var err error
	for addr := range dirty {
		v, _ := b.idx.get(addr)
		if err = setEntry(batch, b.cs, addr, v); err != nil {
			break
		}
	}
	b.dirty, b.pending, b.synced = map[string]struct{}{}, nil, time.Now()
	b.commitMu.Unlock()
	if err == nil {
		err = b.cs.syncAll()
	}
	if err == nil && !batch.Empty() {
		err = batch.Commit(pebble.Sync)
	}
	if err != nil {
		b.unsync(dirty, replaced)
		return fmt.Errorf("slots: sync: %w", err)
	}
	b.counters.syncs.Add(1)
	b.cs.release(replaced)
	return nil
}

// unsync hands a failed sync point's changes to the next one.
func (b *Backend) unsync(dirty map[string]struct{}, replaced []loc) {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	for addr := range dirty {
		b.dirty[addr] = struct{}{}
	}
	b.pending = append(replaced, b.pending...)
}

// DeferSync stops the fsyncs of each Write and Delete
// (backend.SyncDeferrer): a caller that journals every write makes them
// durable with Sync at its checkpoints, and redoes after a crash the
// writes since the last sync point.
func (b *Backend) DeferSync() bool {
	b.deferred.Store(true)
	return true
}

// syncer passes sync points in the background when writes call for one,
// so the Write that crosses a threshold does not wait for the fsyncs.
type syncer struct {
	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

func (b *Backend) startSyncer() {
	b.syncer = syncer{wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go b.runSyncer()
}

// kick asks for a sync point, unless one is asked for already.
func (s syncer) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (b *Backend) runSyncer() {
	defer close(b.syncer.done)
	for {
		select {
		case <-b.syncer.quit:
			return
		case <-b.syncer.wake:
			b.life.RLock()
			if !b.closed {
				b.sync() // a failure leaves the changes to the next sync point, which reports it
			}
			b.life.RUnlock()
		}
	}
}

// stop ends the syncer; the caller does not hold life.
func (s syncer) stop() {
	close(s.quit)
	<-s.done
}
