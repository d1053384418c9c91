package disk

import (
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
)

// Metrics are pebble's figures for this database: how much it rewrites
// what it stores, and whether writers wait for it.
type Metrics struct {
	WriteAmplification float64 // bytes written to disk by flushes and compactions per byte flushed
	Compactions        int64   // compactions since open
	Flushes            int64   // memtable flushes since open
	WriteStalls        int64   // times writers waited for a flush or compaction
	WriteStallSeconds  float64 // total time they waited
	L0Files            int64   // files in level 0 (many: compactions fall behind)
	CacheHitRate       float64 // block cache hits over lookups, 0 with none yet
	CacheBytes         int64   // bytes the block cache holds now
	CacheCapacity      int64   // the most it may hold (Options.CacheSize)
	WALBytes           uint64  // bytes written to pebble's write-ahead log
	DiskBytes          uint64  // bytes the database occupies on disk
}

// stalls counts write stalls from pebble's events.
type stalls struct {
	count atomic.Int64
	nanos atomic.Int64
	began atomic.Int64 // UnixNano of the stall in progress, 0 if none
}

// listener reports pebble's write stalls to s.
func (s *stalls) listener() pebble.EventListener {
	return pebble.EventListener{
		WriteStallBegin: func(pebble.WriteStallBeginInfo) {
			s.count.Add(1)
			s.began.Store(time.Now().UnixNano())
		},
		WriteStallEnd: func() {
			if began := s.began.Swap(0); began != 0 {
				s.nanos.Add(time.Now().UnixNano() - began)
			}
		},
	}
}

// Metrics returns the database's figures now; zero after Close.
func (b *Backend) Metrics() Metrics {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.db == nil {
		return Metrics{}
	}
	m := b.db.Metrics()
	total := m.Total()
	hits, misses := m.BlockCache.Hits, m.BlockCache.Misses
	out := Metrics{
		WriteAmplification: total.WriteAmp(),
		Compactions:        m.Compact.Count,
		Flushes:            m.Flush.Count,
		WriteStalls:        b.stalls.count.Load(),
		WriteStallSeconds:  time.Duration(b.stalls.nanos.Load()).Seconds(),
		L0Files:            m.Levels[0].NumFiles,
		WALBytes:           m.WAL.BytesWritten,
		DiskBytes:          m.DiskSpaceUsage(),
		CacheBytes:         m.BlockCache.Size,
		CacheCapacity:      b.cacheSize,
	}
	if hits+misses > 0 {
		out.CacheHitRate = float64(hits) / float64(hits+misses)
	}
	return out
}
