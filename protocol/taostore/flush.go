package taostore

import (
	"context"
	"slices"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// flush moves blocks of leaf's path and of the stash as deep along the
// path as their own paths allow, at most Z per bucket, and stamps the
// path's nodes (FLUSH; Path ORAM's greedy flush, Sec. IV-A step 2, decided
// by tree.Flusher).
func (s *store) flush(leaf uint64) {
	s.nodeBuf = s.sub.pathNodes(leaf, s.nodeBuf)
	nodes := s.nodeBuf
	blocks := s.flushBlocks[:0]
	for _, n := range nodes {
		blocks = append(blocks, n.blocks...)
		n.blocks = n.blocks[:0]
	}
	for id, v := range s.stash {
		blocks = append(blocks, tree.Block{ID: id, Value: v})
	}
	clear(s.stash)
	leaves, levels := s.flushLeaves[:0], s.flushLevels[:0]
	for _, b := range blocks {
		leaves, levels = append(leaves, s.pos[b.ID]), append(levels, 0)
	}
	s.flusher.Flush(leaf, leaves, levels)
	for i, b := range blocks {
		if levels[i] < 0 {
			s.stash[b.ID] = b.Value
		} else {
			nodes[levels[i]].blocks = append(nodes[levels[i]].blocks, b)
		}
	}
	s.flushBlocks, s.flushLeaves, s.flushLevels = blocks, leaves, levels
	s.counters.stashMax = max(s.counters.stashMax, len(s.stash))
	s.sub.touch(nodes)
}

// startWriteBack writes the buckets of the given flushed paths back to
// storage without blocking new reads (WRITE-BACK, Sec. IV-B step 3). The
// buckets' contents are copied now; sealing, journaling and the versioned
// write run in the background, and on success the nodes untouched since
// are dropped.
func (s *store) startWriteBack(leaves []uint64) {
	buckets := s.storedBuckets(leaves)
	contents, start := s.sub.snapshot(buckets)
	if s.opts.TestingKnobs.Leak == leakUnchangedNotWritten {
		buckets, contents = s.changedOnly(buckets, contents)
	}
	s.version++
	version := s.version
	s.inflight[version] = true
	go func() {
		stale, err := s.writeBack(context.Background(), buckets, contents, version)
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.inflight, version)
		s.landed.Broadcast()
		s.counters.writeBacks++
		s.counters.staleBuckets += uint64(stale)
		if err != nil {
			s.counters.writeBackErrors++ // the nodes stay in the subtree, still authoritative
			return
		}
		s.acknowledge(buckets, version)
		s.sub.release(buckets, start)
	}()
}

// awaitWriteBacks waits until every write-back up to version has ended;
// s.mu is held.
func (s *store) awaitWriteBacks(version uint64) {
	for {
		pending := false
		for v := range s.inflight {
			pending = pending || v <= version
		}
		if !pending {
			return
		}
		s.landed.Wait()
	}
}

// writeBack journals a write-back of buckets under version, so that no
// version storage may hold is ever issued again after a crash, then seals
// them with their contents and writes them in one versioned backend call
// (a write-back storage lost is redone by recovery's writeBackAll). It
// returns how many were stale.
func (s *store) writeBack(ctx context.Context, buckets []uint64, contents [][]tree.Block, version uint64) (int, error) {
	if _, err := s.log.Commit(writeBackDelta(version, buckets)); err != nil {
		return 0, err
	}
	items, err := s.seal(buckets, contents, version)
	if err != nil {
		return 0, err
	}
	return s.b.WriteVersioned(ctx, items)
}

// storedBuckets returns the distinct stored (not cached) buckets of the
// paths to leaves. Union lists buckets level by level, root first, which
// is ascending bucket number, so the cached levels come first.
func (s *store) storedBuckets(leaves []uint64) []uint64 {
	all := s.geo.Union(leaves, nil)
	i, _ := slices.BinarySearch(all, s.geo.BucketAt(0, s.opts.CachedLevels))
	return all[i:]
}

// seal seals buckets with their contents under version, as the items of
// one versioned backend write.
func (s *store) seal(buckets []uint64, contents [][]tree.Block, version uint64) ([]backend.VersionedItem, error) {
	items := make([]backend.VersionedItem, len(buckets))
	for i, b := range buckets {
		addr := s.layout.Addr(b)
		sealed, err := s.codec.EncodeBucket(addr, version, contents[i])
		if err != nil {
			return nil, err
		}
		items[i] = backend.VersionedItem{Addr: addr, Version: version, Value: sealed}
	}
	return items, nil
}

// acknowledge records that storage holds buckets at version or newer: a
// later read that returns an older version is a replay.
func (s *store) acknowledge(buckets []uint64, version uint64) {
	for _, b := range buckets {
		s.acked[b] = max(s.acked[b], version)
	}
}
