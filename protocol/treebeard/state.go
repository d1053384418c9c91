package treebeard

import (
	"context"
	"fmt"
	"iter"
	"math/rand/v2"

	"github.com/oblivkv/oblivkv/internal/sealedstate"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// stateAddr holds the sealed trusted state between a clean Close and the
// next open.
const stateAddr = "tb/state"

// state is what the trusted layers keep between runs. The position map and
// stash are kept whole, not per shard, so the number of Stash shards may
// change between runs; the trees may not.
type state struct {
	Initialised bool
	Pos         map[tree.BlockID]position
	Stash       map[tree.BlockID][]byte
	Trees       []treeState
}

type treeState struct {
	Tree  ringoram.TreeState
	Reads int // path reads since the tree's last eviction
}

// Load implements kv.Loader: every item gets a random tree and leaf and
// the deepest free bucket on its path (overflow goes to its shard's
// stash), and every tree is written once, in large batches.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if n := s.quota.used.Load(); n > 0 {
		return int(n), kv.ErrNotEmpty
	}
	values := map[tree.BlockID][]byte{}
	for k, v := range items {
		values[s.id(k)] = append([]byte{}, v...)
		if int64(len(values)) > s.quota.capacity {
			return 0, fmt.Errorf("%w: %d keys", kv.ErrFull, s.quota.capacity)
		}
	}
	placed := make([][][]tree.Block, len(s.workers))
	for t := range placed {
		placed[t] = make([][]tree.Block, s.geo.Buckets())
	}
	rng, err := newRandSource(s.opts.seed)
	if err != nil {
		return 0, err
	}
	r := rand.New(rng())
	for id, v := range values {
		p := position{Tree: r.IntN(len(s.workers)), Leaf: r.Uint64N(s.geo.Leaves())}
		st := s.stashes[shardOf(id, len(s.stashes))]
		st.mu.Lock()
		st.pos[id] = p
		if !s.geo.PlaceDeepest(placed[p.Tree], s.opts.Z, p.Leaf, tree.Block{ID: id, Value: v}) {
			st.stash[id] = &stashed{value: v, evicting: -1}
			st.noteSize()
		}
		st.mu.Unlock()
	}
	s.quota.used.Store(int64(len(values)))
	if err := s.initTrees(ctx, placed); err != nil {
		return 0, err
	}
	s.initialised.Store(true)
	return len(values), nil
}

func (s *store) saveState(ctx context.Context) error {
	st := state{Initialised: s.initialised.Load(), Pos: map[tree.BlockID]position{}, Stash: map[tree.BlockID][]byte{}}
	for _, sh := range s.stashes {
		sh.mu.Lock()
		for id, p := range sh.pos {
			st.Pos[id] = p
		}
		for id, b := range sh.stash {
			st.Stash[id] = b.value
		}
		sh.mu.Unlock()
	}
	if st.Initialised {
		for _, w := range s.workers {
			st.Trees = append(st.Trees, treeState{Tree: w.tree.State(), Reads: w.reads})
		}
	}
	return sealedstate.Save(ctx, s.b, s.keys, stateAddr, st)
}

// loadState restores the state saved by the last clean Close, then deletes
// it, so a crash from here on is detected at the next open.
func (s *store) loadState(ctx context.Context) error {
	var st state
	if err := sealedstate.Require(ctx, s.b, s.keys, stateAddr, &st); err != nil {
		return fmt.Errorf("treebeard: %w", err)
	}
	// A state that does not fit the options stays saved: a restart with
	// the right options still finds it.
	if err := s.restore(st); err != nil {
		return err
	}
	return sealedstate.Delete(ctx, s.b, s.keys, stateAddr)
}

func (s *store) restore(st state) error {
	if st.Initialised && len(st.Trees) != len(s.workers) {
		return fmt.Errorf("%w: the store has %d trees, the options ask for %d", kv.ErrMismatch, len(st.Trees), len(s.workers))
	}
	for i, ts := range st.Trees {
		if err := s.workers[i].tree.Restore(ts.Tree); err != nil {
			return fmt.Errorf("%w: tree %d: %v", kv.ErrMismatch, i, err)
		}
		s.workers[i].reads = ts.Reads
	}
	for id, p := range st.Pos {
		if p.Tree < 0 || p.Tree >= len(s.workers) || p.Leaf >= s.geo.Leaves() {
			return fmt.Errorf("%w: a block's position is outside the trees", kv.ErrMismatch)
		}
		s.stashes[shardOf(id, len(s.stashes))].pos[id] = p
	}
	for id, v := range st.Stash {
		s.stashes[shardOf(id, len(s.stashes))].stash[id] = &stashed{value: v, evicting: -1}
	}
	s.quota.used.Store(int64(len(st.Pos)))
	s.initialised.Store(st.Initialised)
	return nil
}

// Stats reports the layers' counters: stash sizes, real and fake reads,
// and the trees' reads, reshuffles and evictions.
func (s *store) Stats() kv.Stats {
	var stashSize, shardMax int
	var real, fake, hits uint64
	for _, sh := range s.stashes {
		sh.mu.Lock()
		stashSize += len(sh.stash)
		shardMax = max(shardMax, sh.stats.stashMax)
		real, fake, hits = real+sh.stats.realReads, fake+sh.stats.fakeReads, hits+sh.stats.stashHits
		sh.mu.Unlock()
	}
	var t ringoram.Stats
	var evictErrs, readErrs uint64
	for _, w := range s.workers {
		ws := w.snapshot()
		t.PathReads += ws.tree.PathReads
		t.MultiReads += ws.tree.MultiReads
		t.BucketsRead += ws.tree.BucketsRead
		t.Reshuffles += ws.tree.Reshuffles
		t.Evictions += ws.tree.Evictions
		t.EvictedPaths += ws.tree.EvictedPaths
		evictErrs += ws.evictionErrors
		readErrs += ws.readErrors
	}
	perPath := 0.0
	if t.PathReads > 0 {
		perPath = float64(t.BucketsRead) / float64(t.PathReads)
	}
	return kv.Stats{Keys: s.quota.used.Load(), Extra: []kv.Stat{
		{Name: "trees", Value: float64(len(s.workers))},
		{Name: "tree_levels", Value: float64(s.geo.L + 1)},
		{Name: "stash_shards", Value: float64(len(s.stashes))},
		{Name: "stash_size", Value: float64(stashSize)},
		{Name: "stash_max_shard", Value: float64(shardMax)},
		{Name: "real_reads", Value: float64(real)},
		{Name: "fake_reads", Value: float64(fake)},
		{Name: "stash_hits", Value: float64(hits)},
		{Name: "path_reads", Value: float64(t.PathReads)},
		{Name: "multi_path_reads", Value: float64(t.MultiReads)},
		{Name: "buckets_per_path", Value: perPath},
		{Name: "reshuffles", Value: float64(t.Reshuffles)},
		{Name: "evictions", Value: float64(t.Evictions)},
		{Name: "evicted_paths", Value: float64(t.EvictedPaths)},
		{Name: "read_errors", Value: float64(readErrs)},
		{Name: "eviction_errors", Value: float64(evictErrs)},
	}}
}
