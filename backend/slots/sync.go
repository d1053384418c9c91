package slots

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/vfs"
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

// DeferSync stops the fsyncs of each Write and Delete
// (backend.SyncDeferrer): a caller that journals every write makes them
// durable with Sync at its checkpoints, and redoes after a crash the
// writes since the last sync point.
func (b *Backend) DeferSync() bool {
	b.deferred.Store(true)
	return true
}

// sync passes a sync point: it takes G, the last generation begun, waits
// until every Write up to G has put its values in their slots (a Write
// that returned may have a later generation than one still under way),
// fsyncs the slot files, records G, then frees the slots that Writes up
// to G replaced. Later Writes go on meanwhile.
func (b *Backend) sync() error {
	b.syncMu.Lock()
	defer b.syncMu.Unlock()
	b.commitMu.Lock()
	g := b.nextGen - 1
	for b.underWay(g) {
		b.finished.Wait()
	}
	var free []loc
	b.pending = slices.DeleteFunc(b.pending, func(r replaced) bool {
		if r.gen <= g {
			free = append(free, r.at)
		}
		return r.gen <= g
	})
	b.synced = time.Now()
	b.commitMu.Unlock()
	err := b.cs.syncAll()
	if err == nil && g > b.durable {
		err = b.marker.record(g)
	}
	if err != nil {
		b.commitMu.Lock()
		for _, at := range free { // the next sync point frees them
			b.pending = append(b.pending, replaced{at, g})
		}
		b.commitMu.Unlock()
		return fmt.Errorf("slots: sync: %w", err)
	}
	b.durable = max(b.durable, g)
	b.syncs.Add(1)
	b.cs.release(free)
	return nil
}

// underWay reports whether a Write of generation g or earlier is under
// way; the caller holds commitMu.
func (b *Backend) underWay(g uint64) bool {
	for gen := range b.inflight {
		if gen <= g {
			return true
		}
	}
	return false
}

// syncedFile names the file that records the last sync point.
const syncedFile = "SYNCED"

// syncMarker is the SYNCED file: two records of a generation and its
// checksum, written in turn, so a crash while one is written leaves the
// other; the higher whole one is the last sync point.
type syncMarker struct {
	f    vfs.File
	turn int64
}

const markerRecord = 16

func openMarker(fs vfs.FS, dir string, readOnly bool) (*syncMarker, uint64, error) {
	name := filepath.Join(dir, syncedFile)
	var f vfs.File
	var err error
	if readOnly {
		f, err = fs.Open(name)
	} else if f, err = fs.OpenReadWrite(name); err == nil {
		err = syncDir(fs, dir)
	}
	if err != nil {
		return nil, 0, err
	}
	buf := make([]byte, 2*markerRecord)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, 0, err
	}
	m, g := &syncMarker{f: f}, uint64(0)
	for turn := range int64(2) {
		rec := buf[turn*markerRecord:]
		if gen := binary.BigEndian.Uint64(rec); gen > g && crc32.Checksum(rec[:8], castagnoli) == binary.BigEndian.Uint32(rec[8:]) {
			g, m.turn = gen, 1-turn
		}
	}
	return m, g, nil
}

// record makes g the last sync point, durably.
func (m *syncMarker) record(g uint64) error {
	rec := binary.BigEndian.AppendUint64(nil, g)
	rec = binary.BigEndian.AppendUint32(rec, crc32.Checksum(rec, castagnoli))
	rec = append(rec, make([]byte, markerRecord-len(rec))...)
	if _, err := m.f.WriteAt(rec, m.turn*markerRecord); err != nil {
		return err
	}
	m.turn = 1 - m.turn
	return m.f.SyncData()
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
				b.sync() // a failure leaves its work to the next sync point, which reports it
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
