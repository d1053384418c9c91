package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/raftgroup"
	"github.com/oblivkv/oblivkv/cluster/rpc"
	"github.com/oblivkv/oblivkv/seal"
)

// Group is the replica's raft group, as the Handler uses it
// (*raftgroup.Group).
type Group interface {
	AddVoter(raftgroup.Peer) error
	RemoveServer(id string) error
	Members() ([]raftgroup.Peer, error)
	Leader() (id, addr string)
	IsLeader() bool
	Status() raftgroup.Status
	Leave()
}

// Handler is a replica's rpc.Handler: it answers the operator's
// requests itself and hands every other message to the process's own
// Handler.
type Handler struct {
	next  rpc.Handler
	self  string // the replica's id
	keys  *seal.Keys
	group Group
	live  *cluster.Live
}

// NewHandler returns the Handler of replica self of the cluster live
// describes, whose raft group is g, in front of next.
func NewHandler(next rpc.Handler, self string, keys *seal.Keys, g Group, live *cluster.Live) *Handler {
	return &Handler{next: next, self: self, keys: keys, group: g, live: live}
}

// Handle answers a request of process from (the id its certificate
// names), which must be the operator's; any other message goes to the
// next Handler.
func (h *Handler) Handle(ctx context.Context, from string, m rpc.Message) (rpc.Message, error) {
	if m.Kind != KindRequest {
		return h.next.Handle(ctx, from, m)
	}
	if from != cluster.AdminID {
		return rpc.Message{}, fmt.Errorf("membership: process %q may not ask %s about its group: only the operator's certificate (%s) may", from, h.self, cluster.AdminID)
	}
	var req Request
	if err := openMessage(h.keys, m, KindRequest, h.self, &req); err != nil {
		return rpc.Message{}, err
	}
	reply, err := h.answer(req)
	if err != nil {
		return rpc.Message{}, err
	}
	return sealMessage(h.keys, KindReply, h.self, reply)
}

// answer carries out req.
func (h *Handler) answer(req Request) (Reply, error) {
	var changed bool
	var err error
	switch req.Op {
	case OpMembers:
	case OpAdd:
		changed, err = h.onLeader(func(members []raftgroup.Peer) (bool, error) { return h.add(members, req) })
	case OpRemove:
		var left []raftgroup.Peer
		changed, err = h.onLeader(func(members []raftgroup.Peer) (bool, error) {
			left = slices.DeleteFunc(slices.Clone(members), func(p raftgroup.Peer) bool { return p.ID == req.ID })
			return h.remove(members, req.ID)
		})
		if err == nil && changed && req.ID == h.self {
			// The leader removed itself: its raft stops, and may have
			// stopped already, so the group is what the removal left,
			// with no leader until the others elect one.
			return Reply{Self: State{ID: h.self}, Members: left, Changed: true}, nil
		}
	case OpLeave:
		if req.ID != h.self {
			return Reply{}, fmt.Errorf("membership: %s was asked to stop as %q", h.self, req.ID)
		}
		h.group.Leave()
	default:
		err = fmt.Errorf("membership: no operation %q", req.Op)
	}
	if err != nil {
		return Reply{}, err
	}
	reply, err := h.state()
	reply.Changed = changed
	return reply, err
}

// onLeader runs change with the group's members if the replica leads,
// and answers an *rpc.NotLeaderError otherwise (also when it stopped
// leading during the change).
func (h *Handler) onLeader(change func([]raftgroup.Peer) (bool, error)) (bool, error) {
	if !h.group.IsLeader() {
		return false, h.notLeader()
	}
	members, err := h.group.Members()
	if err != nil {
		return false, err
	}
	changed, err := change(members)
	if errors.Is(err, raftgroup.ErrNotLeader) {
		return false, h.notLeader()
	}
	return changed, err
}

func (h *Handler) notLeader() error {
	id, _ := h.group.Leader()
	return &rpc.NotLeaderError{Leader: id}
}

// add adds req's replica, which the configuration file must name in the
// replica's group with the raft address req gives: the leader dials it
// there, under its certificate.
func (h *Handler) add(members []raftgroup.Peer, req Request) (bool, error) {
	name, r, err := h.configured(req.ID)
	if err != nil {
		return false, err
	}
	if r.Raft != req.Raft {
		return false, fmt.Errorf("membership: %s's raft address is %s in the configuration file %s reads, not %s", req.ID, r.Raft, h.self, req.Raft)
	}
	peer := raftgroup.Peer{ID: r.ID, Addr: r.Raft}
	if slices.Contains(members, peer) {
		return false, nil
	}
	if err := h.group.AddVoter(peer); err != nil {
		return false, fmt.Errorf("membership: adding %s to %s: %w", req.ID, name, err)
	}
	return true, nil
}

// configured returns the name of the replica's group and its replica id
// in the configuration file, read again at once if the one in use has
// no such replica (the operator has just added it).
func (h *Handler) configured(id string) (string, cluster.Replica, error) {
	r, ok := cluster.FindNow(h.live, func(c *cluster.Config) (cluster.Replica, bool) {
		_, g, _ := c.GroupOf(h.self)
		return g.Replica(id)
	})
	name, _, _ := h.live.Config().GroupOf(h.self)
	if !ok {
		return "", r, fmt.Errorf("membership: %s is not a replica of %s in the configuration file %s reads: add it to the group's replicas there first", id, name, h.self)
	}
	return name, r, nil
}

// remove removes replica id, unless it would leave the group empty.
func (h *Handler) remove(members []raftgroup.Peer, id string) (bool, error) {
	if !slices.ContainsFunc(members, func(p raftgroup.Peer) bool { return p.ID == id }) {
		return false, nil
	}
	if len(members) == 1 {
		return false, fmt.Errorf("membership: removing %s would leave its group empty: a group needs at least one replica", id)
	}
	if err := h.group.RemoveServer(id); err != nil {
		return false, fmt.Errorf("membership: removing %s: %w", id, err)
	}
	return true, nil
}

// state is the replica's Reply: its own state and its group's.
func (h *Handler) state() (Reply, error) {
	st := h.group.Status()
	leader, _ := h.group.Leader()
	members, err := h.group.Members()
	if err != nil {
		return Reply{}, err
	}
	return Reply{
		Self:    State{ID: h.self, State: st.State, Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex},
		Leader:  leader,
		Members: members,
	}, nil
}
