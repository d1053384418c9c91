package taostore

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/oblivkv/oblivkv/internal/sealedstate"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// stateAddr holds the sealed proxy state between a clean Close and the
// next open.
const stateAddr = "tao/state"

// state is what the proxy keeps between runs.
type state struct {
	Z, CachedLevels int // the layout the tree was written with
	Pos             map[tree.BlockID]uint64
	Stash           map[tree.BlockID][]byte
	Cached          map[uint64][]tree.Block
	Version         uint64
	Acked           []uint64
}

// writeInitial writes every stored bucket of the tree, holding blocks[b]
// (blocks may be nil: an empty tree), under one new version, in writes of
// about tree.DefaultBatchBytes: the initial layout of a fresh or
// bulk-loaded store, never one access per block.
func (s *store) writeInitial(ctx context.Context, blocks [][]tree.Block) error {
	s.version++
	per := uint64(max(1, tree.DefaultBatchBytes/s.codec.BucketSize()))
	n := s.geo.Buckets()
	for start := s.geo.BucketAt(0, s.opts.CachedLevels); start < n; start += per {
		buckets := make([]uint64, 0, per)
		for b := start; b < min(start+per, n); b++ {
			buckets = append(buckets, b)
		}
		contents := make([][]tree.Block, len(buckets))
		if blocks != nil {
			copy(contents, blocks[start:])
		}
		if _, err := s.writeBuckets(ctx, buckets, contents, s.version); err != nil {
			return fmt.Errorf("writing the initial tree: %w", err)
		}
		s.acknowledge(buckets, s.version)
	}
	return nil
}

// Load implements kv.Loader: every item gets a random leaf and the deepest
// bucket with room on its path (overflow goes to the stash), and the whole
// tree is written in large batches.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pos) > 0 {
		return len(s.pos), kv.ErrNotEmpty
	}
	values := map[tree.BlockID][]byte{}
	for k, v := range items {
		values[s.blockID(k)] = append([]byte{}, v...)
		if len(values) > s.capacity {
			return 0, errFull(s.capacity)
		}
	}
	placed := make([][]tree.Block, s.geo.Buckets())
	for id, v := range values {
		s.pos[id] = s.randomLeaf()
		if !s.geo.PlaceDeepest(placed, s.opts.Z, s.pos[id], tree.Block{ID: id, Value: v}) {
			s.stash[id] = v
		}
	}
	for b, n := range s.sub.nodes { // the cached levels stay in memory
		n.blocks, placed[b] = placed[b], nil
	}
	if err := s.writeInitial(ctx, placed); err != nil {
		return 0, err
	}
	return len(s.pos), nil
}

// Close waits for the write-backs in flight, writes the whole subtree
// back, saves the proxy state sealed and closes the backend.
func (s *store) Close() error {
	s.writeBacks.Wait()
	ctx := context.Background()
	s.mu.Lock()
	buckets := s.sub.stored()
	contents, _ := s.sub.snapshot(buckets)
	s.version++
	version := s.version
	s.mu.Unlock()
	_, err := s.writeBuckets(ctx, buckets, contents, version)
	if err == nil {
		s.mu.Lock()
		s.acknowledge(buckets, version)
		s.mu.Unlock()
		err = s.saveState(ctx)
	}
	return errors.Join(err, s.b.Close())
}

func (s *store) saveState(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock() // the maps are encoded as they are
	st := state{Z: s.opts.Z, CachedLevels: s.opts.CachedLevels, Pos: s.pos, Stash: s.stash, Cached: map[uint64][]tree.Block{}, Version: s.version, Acked: s.acked}
	for b, n := range s.sub.nodes {
		if n.cached {
			st.Cached[b] = n.blocks
		}
	}
	return sealedstate.Save(ctx, s.b, s.keys, stateAddr, st)
}

// loadState restores the state saved by the last clean Close, then
// deletes it, so a crash from here on is detected at the next open.
func (s *store) loadState(ctx context.Context) error {
	var st state
	if err := sealedstate.Require(ctx, s.b, s.keys, stateAddr, &st); err != nil {
		return fmt.Errorf("taostore: %w", err)
	}
	// Checked before the state is deleted: a restart with the right
	// options still finds it.
	if st.Z != s.opts.Z || st.CachedLevels != s.opts.CachedLevels {
		return fmt.Errorf("%w: the store was written with Z=%d CachedLevels=%d, the options ask for Z=%d CachedLevels=%d",
			kv.ErrMismatch, st.Z, st.CachedLevels, s.opts.Z, s.opts.CachedLevels)
	}
	if st.Pos != nil {
		s.pos = st.Pos
	}
	if st.Stash != nil {
		s.stash = st.Stash
	}
	for b, blocks := range st.Cached {
		if n, ok := s.sub.nodes[b]; ok && n.cached {
			n.blocks = blocks
		}
	}
	s.version = st.Version
	if len(st.Acked) == len(s.acked) {
		s.acked = st.Acked
	}
	return sealedstate.Delete(ctx, s.b, s.keys, stateAddr)
}

func (s *store) Stats() kv.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counters
	return kv.Stats{Keys: int64(len(s.pos)), Extra: []kv.Stat{
		{Name: "tree_levels", Value: float64(s.geo.L + 1)},
		{Name: "z", Value: float64(s.opts.Z)},
		{Name: "k", Value: float64(s.opts.K)},
		{Name: "stash_size", Value: float64(len(s.stash))},
		{Name: "stash_max", Value: float64(c.stashMax)},
		{Name: "subtree_nodes", Value: float64(len(s.sub.nodes))},
		{Name: "subtree_max", Value: float64(s.sub.max)},
		{Name: "real_reads", Value: float64(c.realReads)},
		{Name: "fake_reads", Value: float64(c.fakeReads)},
		{Name: "write_backs", Value: float64(c.writeBacks)},
		{Name: "stale_buckets", Value: float64(c.staleBuckets)},
		{Name: "write_back_errors", Value: float64(c.writeBackErrors)},
	}}
}
