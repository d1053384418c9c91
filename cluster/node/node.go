// Package node runs one replica of a cluster's shard in a process: it
// follows its raft group's leadership and starts the shard's drivers
// when the replica becomes leader, ends them when it stops leading.
//
// It owns the hand-over between raft and the shard's drivers: a new
// leader first applies every entry committed before its term
// (raftgroup.Group.Barrier), then starts its term with a fencing token
// made of the raft term and the index it starts at, so that storage
// refuses a deposed leader's late Write. It never proposes an entry,
// never reads a machine and never talks to storage itself: the shard's
// drivers do (protocol/treebeard's StashNode and ORAMNode).
package node

import (
	"context"
	"log/slog"
	"time"

	"github.com/oblivkv/oblivkv/cluster/raftgroup"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// Leader is a shard's replica whose drivers run while it leads its group.
type Leader interface {
	// Lead starts the replica's term, proposing to g and writing to
	// storage with fence.
	Lead(ctx context.Context, g treebeard.Proposer, fence uint64) error
	// StepDown ends it.
	StepDown()
}

// recheck is how often Follow looks at the replica's state even when
// raft says nothing (raft's leadership channel keeps only the latest
// change), and how long it waits after a term that failed to start.
const recheck = 250 * time.Millisecond

// Follow starts l's term whenever g's replica becomes leader and ends it
// when the replica stops leading, until ctx ends (its term ends then
// too).
func Follow(ctx context.Context, g *raftgroup.Group, l Leader, log *slog.Logger) {
	var term uint64 // the raft term l leads in; 0 while it does not lead
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if term != 0 {
				l.StepDown()
			}
			return
		case <-g.LeaderCh():
		case <-tick.C:
		}
		now := g.IsLeader()
		if term != 0 && (!now || g.Status().Term != term) {
			// Lost, or lost and won again in a later term between two
			// looks: the term's drivers end, and their fence with them.
			l.StepDown()
			term = 0
			log.Info("stepped down")
		}
		if now && term == 0 {
			term = lead(ctx, g, l, log)
		}
	}
}

// lead starts l's term on g's leader, and returns the raft term it leads
// in, 0 if it did not start.
func lead(ctx context.Context, g *raftgroup.Group, l Leader, log *slog.Logger) uint64 {
	if err := g.Barrier(ctx); err != nil {
		log.Warn("taking over: applying the committed entries", "err", err)
		return 0
	}
	st := g.Status()
	fence := durable.FenceToken(st.Term, min(st.CommitIndex, durable.MaxFencedLSN))
	if err := l.Lead(ctx, g, fence); err != nil {
		l.StepDown()
		log.Warn("taking over", "term", st.Term, "err", err)
		return 0
	}
	log.Info("leading", "term", st.Term, "index", st.CommitIndex)
	return st.Term
}
