package treebeard

import (
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// roomAtMost is the room for new keys a batch may need whatever the
// shard holds: one per block it names that one of its requests may
// create.
func roomAtMost(batch []Request) int64 {
	seen := map[tree.BlockID]bool{}
	for _, r := range batch {
		if mayCreate(r) && !seen[r.ID] {
			seen[r.ID] = true
		}
	}
	return int64(len(seen))
}

// takeOver finishes, as the group's new leader, the epochs the group
// holds open: it sends again the parts whose results never came back
// (stashCore.outstanding), under the same ids and with the same reads,
// so a tree answers them from its record or reads them once, and ends
// each epoch once its replies are made. Its Router gets the reply when
// it sends its batch again.
func (s *Stash) takeOver() {
	var open []uint64
	var parts []sentPart
	var made map[uint64]bool
	s.view(func(c *stashCore) {
		parts = c.outstanding()
		made = map[uint64]bool{}
		for epoch, ep := range c.epochs {
			open = append(open, epoch)
			made[epoch] = ep.Left == 0
		}
	})
	slices.Sort(open)
	for _, epoch := range open {
		var left []sentPart
		for _, p := range parts {
			if p.Epoch == epoch {
				left = append(left, p)
			}
		}
		go s.finish(epoch, left, made[epoch])
	}
}

// finish ends an open epoch taken over: the parts not back are sent
// again, and once its replies are made its end is committed.
func (s *Stash) finish(epoch uint64, parts []sentPart, made bool) {
	s.readParts(parts)
	if !made {
		select {
		case <-s.done.of(epoch):
			s.done.forget(epoch)
		case <-s.group.deposed():
			return
		}
	}
	s.journal(epoch)
}
