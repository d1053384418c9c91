package membership

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/raftgroup"
	"github.com/oblivkv/oblivkv/cluster/rpc"
	"github.com/oblivkv/oblivkv/seal"
)

// Admin is the operator's side: it asks a group's replicas, as
// cluster.AdminID, under the store key.
type Admin struct {
	cfg       *cluster.Config
	keys      *seal.Keys
	plaintext bool
}

// NewAdmin returns the operator's side of the cluster cfg describes: it
// reads the store key, and calls under the admin certificate unless
// plaintext.
func NewAdmin(cfg *cluster.Config, plaintext bool) (*Admin, error) {
	keys, err := cluster.ReadKeys(cfg)
	if err != nil {
		return nil, err
	}
	return &Admin{cfg: cfg, keys: keys, plaintext: plaintext}, nil
}

// retryEvery is how long Admin waits before asking a group again while
// it has no leader, or to look at a new replica again.
const retryEvery = 200 * time.Millisecond

// Ask sends req to replica r and returns its reply.
func (a *Admin) Ask(ctx context.Context, r cluster.Replica, req Request) (Reply, error) {
	var tlsCfg *tls.Config
	if !a.plaintext {
		var err error
		if tlsCfg, err = cluster.ClientTLS(a.cfg.Certs, cluster.AdminID, r.ID); err != nil {
			return Reply{}, err
		}
	}
	c, err := rpc.Dial(cluster.AdminID, r.ID, r.RPC, tlsCfg)
	if err != nil {
		return Reply{}, err
	}
	defer c.Close()
	m, err := sealMessage(a.keys, KindRequest, r.ID, req)
	if err != nil {
		return Reply{}, err
	}
	if m, err = c.Call(ctx, m); err != nil {
		return Reply{}, err
	}
	var reply Reply
	return reply, openMessage(a.keys, m, KindReply, r.ID, &reply)
}

// AskLeader sends req to the leader of group (named name): it asks each
// replica in turn, going straight to the leader one names, and asks the
// group again while no replica leads, until ctx ends. A replica's
// refusal of req ends it at once.
func (a *Admin) AskLeader(ctx context.Context, name string, g cluster.Group, req Request) (Reply, error) {
	var last error
	for {
		reply, err := a.askRound(ctx, g, req)
		if err == nil || refused(err) {
			return reply, err
		}
		last = err
		select {
		case <-ctx.Done():
			return Reply{}, fmt.Errorf("membership: no leader of %s answered: %w", name, last)
		case <-time.After(retryEvery):
		}
	}
}

// askRound asks each replica of g in turn until the leader answers.
func (a *Admin) askRound(ctx context.Context, g cluster.Group, req Request) (Reply, error) {
	var errs []error
	for _, r := range g.Replicas {
		reply, err := a.Ask(ctx, r, req)
		var nl *rpc.NotLeaderError
		if errors.As(err, &nl) && nl.Leader != "" && nl.Leader != r.ID {
			if leader, ok := g.Replica(nl.Leader); ok {
				r = leader
				reply, err = a.Ask(ctx, r, req)
			}
		}
		if err != nil && refused(err) {
			return reply, fmt.Errorf("%s refused: %s", r.ID, reason(err))
		}
		if err == nil {
			return reply, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.ID, err))
	}
	return Reply{}, errors.Join(errs...)
}

// refused reports whether err is final: a replica's refusal of the
// request, or the operator's own side failing (no certificate), rather
// than a replica that does not lead or cannot be reached, which asking
// again may change.
func refused(err error) bool {
	var nl *rpc.NotLeaderError
	if errors.As(err, &nl) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// reason is a refusal's message: a replica's own words, without the
// rpc layers' wrapping.
func reason(err error) string {
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) && st.GRPCStatus().Code() == codes.Unknown {
		return st.GRPCStatus().Message()
	}
	return err.Error()
}

// group returns the group of replica id and its name, from the
// configuration.
func (a *Admin) group(id string) (string, cluster.Group, cluster.Replica, error) {
	name, g, ok := a.cfg.GroupOf(id)
	if !ok {
		return "", g, cluster.Replica{}, fmt.Errorf("no replica %q of a stash or oram group in the configuration: add it to its group's replicas first", id)
	}
	r, _ := g.Replica(id)
	return name, g, r, nil
}

// Add asks the leader of replica id's group to add it as a voter, then
// waits until the replica has applied every entry the leader had
// committed when the change was committed: the replica, started with
// --join, then serves as one of the group's quorum.
func (a *Admin) Add(ctx context.Context, id string) (Reply, error) {
	name, g, r, err := a.group(id)
	if err != nil {
		return Reply{}, err
	}
	reply, err := a.change(ctx, name, g, Request{Op: OpAdd, ID: id, Raft: r.Raft}, true)
	if err != nil {
		return Reply{}, err
	}
	return reply, a.waitCaughtUp(ctx, r, reply.Self.CommitIndex)
}

// waitCaughtUp waits until replica r has applied entry index.
func (a *Admin) waitCaughtUp(ctx context.Context, r cluster.Replica, index uint64) error {
	var last error
	for {
		st, err := a.Ask(ctx, r, Request{Op: OpMembers})
		if err == nil && st.Self.AppliedIndex >= index {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("it has applied %d", st.Self.AppliedIndex)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("membership: %s was added, but has not caught up to the leader's entry %d in time (%v): is it running, started with --join, and can the leader reach its raft address %s?", r.ID, index, last, r.Raft)
		case <-time.After(retryEvery):
		}
	}
}

// Remove asks the leader of replica id's group to remove it (the leader
// itself too: it steps down once the change is committed).
func (a *Admin) Remove(ctx context.Context, id string) (Reply, error) {
	name, g, _, err := a.group(id)
	if err != nil {
		return Reply{}, err
	}
	reply, err := a.change(ctx, name, g, Request{Op: OpRemove, ID: id}, false)
	if err == nil && reply.Changed {
		a.tellRemoved(ctx, g, id)
	}
	return reply, err
}

// tellRemoved tells replica id, removed from group g, to stop
// (raftgroup.Group.Leave): it may never see the change itself. One that
// does not answer (down, or stopped already) is left alone.
func (a *Admin) tellRemoved(ctx context.Context, g cluster.Group, id string) {
	r, ok := g.Replica(id)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leaveWait)
	defer cancel()
	a.Ask(ctx, r, Request{Op: OpLeave, ID: id})
}

// leaveWait bounds the wait for a removed replica's answer to OpLeave.
const leaveWait = 5 * time.Second

// change asks the leader of group g (named name) for req, which makes
// replica req.ID a member when member is true and not one otherwise. Its
// reply says Changed also when the retry that answered found nothing to
// do, but the leader's configuration, asked first, had req.ID on the
// other side: the change was made while this call ran, by an attempt
// whose answer was lost (a leader that removed itself and stepped down
// before answering, a connection cut) or by another operator.
func (a *Admin) change(ctx context.Context, name string, g cluster.Group, req Request, member bool) (Reply, error) {
	before, err := a.leaderView(ctx, name, g)
	if err != nil {
		return Reply{}, err
	}
	reply, err := a.AskLeader(ctx, name, g, req)
	if err == nil && !reply.Changed && hasMember(before.Members, req.ID) != member {
		reply.Changed = true
	}
	return reply, err
}

// hasMember reports whether members holds replica id.
func hasMember(members []raftgroup.Peer, id string) bool {
	return slices.ContainsFunc(members, func(p raftgroup.Peer) bool { return p.ID == id })
}

// leaderView returns the leader's Reply to members: any replica answers
// members, but only the leader's configuration is the group's latest
// (the first replica's answer when the leader does not answer).
func (a *Admin) leaderView(ctx context.Context, name string, g cluster.Group) (Reply, error) {
	reply, err := a.AskLeader(ctx, name, g, Request{Op: OpMembers})
	if err != nil || reply.Leader == reply.Self.ID {
		return reply, err
	}
	if r, ok := g.Replica(reply.Leader); ok {
		if lr, err := a.Ask(ctx, r, Request{Op: OpMembers}); err == nil {
			return lr, nil
		}
	}
	return reply, nil
}

// Member is one member of a group, as it says of itself.
type Member struct {
	State
	Raft  string `json:"raft"`
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"` // why it did not answer
}

// Members returns the members of replica id's group in its leader's
// raft configuration, each with its state as it says, and the leader.
func (a *Admin) Members(ctx context.Context, id string) (leader string, members []Member, err error) {
	name, g, _, err := a.group(id)
	if err != nil {
		return "", nil, err
	}
	reply, err := a.leaderView(ctx, name, g)
	if err != nil {
		return "", nil, err
	}
	for _, p := range reply.Members {
		m := Member{State: State{ID: p.ID}, Raft: p.Addr}
		if r, ok := g.Replica(p.ID); !ok {
			m.Error = "not in the configuration file"
		} else if st, err := a.Ask(ctx, r, Request{Op: OpMembers}); err != nil {
			m.Error = err.Error()
		} else {
			m.State, m.Up = st.Self, true
		}
		members = append(members, m)
	}
	return reply.Leader, members, nil
}
