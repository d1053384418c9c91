package treebeard

import (
	"context"
	"errors"
)

// A Stash shard or an ORAM shard as a replicated group (Treebeard Sec.
// 7.2): every replica's machine is applied by raft from the group's
// committed entries (Replica), and the replica that leads runs the
// shard's drivers over it for as long as its term lasts. A driver
// proposes each input as an entry and acts on the outputs only once the
// entry is committed and applied: no Read, Write or message leaves for a
// step the group could lose. When the term ends, everything the drivers
// wait for fails as lost in transit (lostLead), so their senders send
// again, to the next leader, whose drivers first issue again what the
// group's state says is outstanding (Stash.takeOver, treeWorker.takeOver).

// Proposer is a replicated group as its leader's drivers use it:
// cluster/raftgroup.Group is one. Propose returns what the machine's
// Apply returned for entry, once it is committed and applied here.
type Proposer interface {
	Propose(ctx context.Context, entry []byte) (any, error)
}

// errDeposed fails what a driver whose term ended still waits for.
var errDeposed = errors.New("treebeard: this replica no longer leads its group")

// lostLead is the Status of a call a driver could not finish because its
// term ended (err): lost in transit, so that its sender sends it again,
// to the group's next leader.
func lostLead(err error) Status {
	return Status{Code: CodeTransport, Detail: "treebeard: " + err.Error()}
}

// term is a replicated group as the drivers leading it for one term see
// it.
type term struct {
	replica *Replica // this process's replica
	group   Proposer
	lost    chan struct{} // closed when the term ends
}

func newTerm(r *Replica, g Proposer) *term {
	return &term{replica: r, group: g, lost: make(chan struct{})}
}

// propose appends entry to the group's log and returns its outputs once
// it is applied here.
func (g *term) propose(entry []byte) (any, error) {
	select {
	case <-g.lost:
		return nil, errDeposed
	default:
	}
	return g.group.Propose(context.Background(), entry)
}

// view calls f between two entries of the replica's machine.
func (g *term) view(f func()) { g.replica.view(f) }

// deposed returns a channel closed when the term ends; nil (never) for a
// shard in this process.
func (g *term) deposed() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.lost
}

// end ends the term.
func (g *term) end() { close(g.lost) }
