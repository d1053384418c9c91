package treebeard

import (
	"context"
	"fmt"
	"strconv"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
)

// The store's incarnation is the journal's (durable.Log.Incarnation): it
// grows by one at every open of the store, before the open's first
// storage write, and survives restarts. The MsgIDs and RequestIDs of one
// open carry it, so they never repeat those of an earlier open, although
// epochs, eviction numbers, request numbers and the admin sequence start
// again at each open; and every tree's writes carry it in their fencing
// token. A store without a journal (it cannot be reopened) runs as 1.

// startIncarnation makes the store's senders run as the journal's
// incarnation.
func (s *store) startIncarnation() {
	s.net.incarnation.Store(max(s.log.Incarnation(), 1))
}

// fencePrefix begins the storage address of each tree's fencing token.
const fencePrefix = backend.FenceKeyPrefix + "treebeard/"

// fenced is the storage of tree t: every Write and writing Pipeline of
// the tree (its operations', its Init's, a recovery's) carries the tree's
// fence, at fencePrefix+t, with the store's incarnation as its term and no
// index (storage learns only how often the store was opened, which the
// recoveries show it anyway). Once a later open of the store has written
// to the tree, this open's writes are refused (kv.ErrFenced), and with
// them every operation of the tree: the store is deposed (s.deposed), and
// no tree of it reads or writes storage again.
func (s *store) fenced(b backend.Backend, t int) backend.Backend {
	return backend.WithFence(b, func() backend.Fence { return s.fence(t) }, &s.deposed)
}

// fence is tree t's fence in this open.
func (s *store) fence(t int) backend.Fence {
	return backend.Fence{Key: fencePrefix + strconv.Itoa(t), Token: durable.FenceToken(s.net.incarnation.Load(), 0)}
}

// claimFences writes every tree's fence, with no item, before the open's
// first write to any tree: from then on an earlier open's late write to
// any tree is refused, even to a tree this open has not written yet. An
// open that finds a later one's fence already stored fails with
// kv.ErrFenced.
func (s *store) claimFences(ctx context.Context) error {
	for t := range s.workers {
		if err := s.b.WriteFenced(ctx, s.fence(t), nil); err != nil {
			return fmt.Errorf("treebeard: claiming tree %d's fence: %w", t, err)
		}
	}
	return nil
}
