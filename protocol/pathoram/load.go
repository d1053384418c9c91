package pathoram

import (
	"context"
	"fmt"
	"iter"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Load implements kv.Loader: the layout is built in memory, each item on a
// uniformly random leaf and in the deepest bucket of its path with room
// (the placement a flush would make, Sec. IV-A step 2), overflow in the
// stash, and the whole tree is written afresh in large batches. Loading
// more distinct keys than the capacity loads nothing and returns
// kv.ErrFull. If a batch fails to write, the store stops serving (its
// state no longer matches storage); reopened, it is empty. The loaded
// state is checkpointed before Load returns.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.turns.exclusive()
	defer s.turns.done()
	o := s.o
	if err := s.remote.settle(ctx); err != nil {
		return len(o.pos), err
	}
	if len(o.pos) > 0 {
		return len(o.pos), kv.ErrNotEmpty
	}
	vals, names := map[tree.BlockID][]byte{}, map[tree.BlockID]string{}
	for k, v := range items {
		id := tree.IDOf(s.keys, k)
		if _, dup := vals[id]; !dup && len(vals) >= o.capacity {
			return 0, fmt.Errorf("%w: more than %d distinct keys to load; nothing loaded", kv.ErrFull, o.capacity)
		}
		vals[id], names[id] = append([]byte{}, v...), k
	}
	buckets, pos, stash := o.layout(vals)
	// Journaled first: a crash while the tree is rewritten leaves a tree
	// that matches no state, and recovery writes an empty one afresh.
	if _, err := s.log.Commit([]byte{deltaLoad}); err != nil {
		return 0, fmt.Errorf("pathoram: %w", err)
	}
	if err := s.remote.writeTree(ctx, func(b uint64) []tree.Block { return buckets[b] }); err != nil {
		s.remote.broken = fmt.Errorf("pathoram: bulk load failed, the store must be created again: %w", err)
		return 0, s.remote.broken
	}
	o.pos, o.names, o.stash = pos, names, stash
	o.stashMax = max(o.stashMax, len(stash))
	s.publish()
	if err := s.checkpoint(ctx); err != nil {
		return 0, fmt.Errorf("pathoram: %w", err)
	}
	return len(pos), nil
}

// layout places blocks as the bulk load writes them: each on a random leaf,
// in the deepest bucket of its path with fewer than Z blocks.
func (o *oram) layout(vals map[tree.BlockID][]byte) ([][]tree.Block, map[tree.BlockID]uint64, []entry) {
	buckets := make([][]tree.Block, o.g.Buckets())
	pos := make(map[tree.BlockID]uint64, len(vals))
	var stash []entry
	for id, v := range vals {
		leaf := o.randomLeaf()
		pos[id] = leaf
		if !tree.PlaceDeepest(o.g, buckets, o.z, leaf, tree.Block{ID: id, Value: v}) {
			stash = append(stash, entry{id: id, leaf: leaf, val: v})
		}
	}
	return buckets, pos, stash
}
