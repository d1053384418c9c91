package treebeard

import (
	"context"

	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// EvictionBlocks hands the ORAM shard of tree t the stashed blocks the
// position map assigns to t (Sec. 5.2.2, Fig. 4 step 3). Each block takes
// part in one eviction at a time, and its access counter starts at zero.
// Blocks stay in the stash until the eviction acknowledges them. A block
// whose latest change is not journaled yet waits for the next eviction
// (which blocks an eviction places never shows on storage).
func (s *Stash) EvictionBlocks(_ context.Context, t int) ([]ringoram.EvictBlock, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ringoram.EvictBlock
	for id, b := range s.stash {
		p := s.pos[id]
		if p.Tree != t || b.evicting >= 0 || b.unjournaled {
			continue
		}
		b.evicting, b.touched = t, 0
		out = append(out, ringoram.EvictBlock{Block: tree.Block{ID: id, Value: b.value}, Leaf: p.Leaf})
	}
	return out, nil
}

// EvictionDone ends tree t's eviction (Sec. 5.2.2): a block leaves the
// stash only if it was acked (placed) and not accessed since it was handed
// over. An acked block that was accessed meanwhile (updated, moved or
// deleted) stays as it is now, and its copy in the tree is stale.
func (s *Stash) EvictionDone(_ context.Context, t int, blocks []ringoram.EvictBlock, placed []int64) ([]Stale, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var stale []Stale
	for i, eb := range blocks {
		id := eb.Block.ID
		b := s.stash[id]
		mine := b != nil && b.evicting == t
		if mine {
			b.evicting = -1
		}
		if placed[i] < 0 {
			continue
		}
		if mine && b.touched == 0 {
			delete(s.stash, id)
			continue
		}
		stale = append(stale, Stale{Bucket: uint64(placed[i]), ID: id})
	}
	return stale, nil
}
