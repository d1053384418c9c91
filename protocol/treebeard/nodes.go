package treebeard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/seal"
)

// The replicas of a cluster's shards (term.go): a StashNode or an
// ORAMNode is what one replica's process holds of its group, its machine
// (Machine, which raft applies) and, while the replica leads, the
// shard's drivers over it (Lead, StepDown), which serve the shard's
// calls. A replica that does not lead answers every call as lost in
// transit: its sender tries another.

// errNotLeading answers a call to a replica that does not lead.
var errNotLeading = errors.New("treebeard: this replica does not lead its group")

// stashShare is the room for keys of one of shards Stash shards of a
// store of capacity keys: its even share and an eighth more, since keys
// do not hash to shards evenly (no more than the capacity).
func stashShare(capacity int64, shards int) int64 {
	if shards <= 1 {
		return capacity
	}
	return min(capacity, (capacity*9+int64(8*shards)-1)/int64(8*shards))
}

// StashNode is one replica of a Stash shard's group.
type StashNode struct {
	shard   int
	sh      Shape
	replica *Replica
	core    *stashCore
	trees   []PathReader

	mu     sync.Mutex
	driver *Stash // the term's; nil while the replica does not lead
}

// NewStashNode returns a replica of Stash shard i of a store of shape
// sh, whose trees' owners trees reach (by tree).
func NewStashNode(sh Shape, i int, trees []PathReader) (*StashNode, error) {
	r, core, err := newStashReplica(sh)
	if err != nil {
		return nil, err
	}
	return &StashNode{shard: i, sh: sh, replica: r, core: core, trees: trees}, nil
}

// Machine is the replica's machine, which the group's raft applies.
func (n *StashNode) Machine() *Replica { return n.replica }

// Lead starts the replica's term as its group's leader, once it has
// applied every entry committed before (raftgroup.Group.Barrier): a
// group whose machine no entry created is created from this replica's,
// and the epochs the group holds open are finished (Stash.takeOver). A
// Stash shard writes no storage: it needs no fence.
func (n *StashNode) Lead(_ context.Context, g Proposer, _ uint64) error {
	if err := createOnce(n.replica, g); err != nil {
		return err
	}
	net := newNetState()
	net.incarnation.Store(replicatedIncarnation)
	q := &quota{capacity: stashShare(n.sh.capacity, n.sh.opts.StashShards)}
	s := &Stash{id: n.shard, trees: n.trees, group: newTerm(n.replica, g), net: net, quota: q,
		core: n.core, done: newCompletions(), answering: map[MsgID]chan struct{}{}}
	s.view(func(c *stashCore) { q.used.Store(int64(len(c.pos))) })
	n.replica.observeWith(func(in, out any) { s.afterStep(in.(stashEntry), out.(stashOutput)) })
	n.mu.Lock()
	n.driver = s
	n.mu.Unlock()
	s.takeOver()
	return nil
}

// StepDown ends the replica's term: what its driver waits for fails as
// lost in transit.
func (n *StashNode) StepDown() {
	n.mu.Lock()
	s := n.driver
	n.driver = nil
	n.mu.Unlock()
	if s != nil {
		n.replica.observeWith(nil)
		s.group.end()
		s.net.stop()
	}
}

// leader returns the term's driver, nil while the replica does not lead.
func (n *StashNode) leader() *Stash {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.driver
}

func (n *StashNode) Access(m AccessMsg) AccessReply {
	if s := n.leader(); s != nil {
		return s.Access(m)
	}
	return AccessReply{Status: lostLead(errNotLeading)}
}

func (n *StashNode) EvictionBlocks(m EvictionBlocksMsg) EvictionBlocksReply {
	if s := n.leader(); s != nil {
		return s.EvictionBlocks(m)
	}
	return EvictionBlocksReply{Status: lostLead(errNotLeading)}
}

func (n *StashNode) EvictionDone(m EvictionDoneMsg) EvictionDoneReply {
	if s := n.leader(); s != nil {
		return s.EvictionDone(m)
	}
	return EvictionDoneReply{Status: lostLead(errNotLeading)}
}

func (n *StashNode) Admin(m AdminMsg) AdminReply {
	if s := n.leader(); s != nil {
		return s.Admin(m)
	}
	return AdminReply{Status: lostLead(errNotLeading)}
}

// createOnce creates the group's machine from r's, unless an entry
// already did.
func createOnce(r *Replica, g Proposer) error {
	var created bool
	r.view(func() { created = r.created })
	if created {
		return nil
	}
	if _, err := g.Propose(context.Background(), r.Create()); err != nil && !errors.Is(err, errCreatedTwice) {
		return fmt.Errorf("treebeard: creating the group's machine: %w", err)
	}
	return nil
}

// ORAMNode is one replica of an ORAM shard's group: the trees it owns,
// on the shard's own storage.
type ORAMNode struct {
	sh      Shape
	replica *Replica
	trees   map[int]shardTree
	b       backend.Backend
	keys    *seal.Keys
	stashes []EvictionSource

	mu      sync.Mutex
	g       *term
	oram    *ORAM // the term's trees' workers; nil while the replica does not lead
	deposed backend.Deposition
}

// NewORAMNode returns a replica of ORAM shard k of shards of a store of
// shape sh, over storage b, whose Stash shards stashes reach (by
// shard).
func NewORAMNode(sh Shape, k, shards int, b backend.Backend, keys *seal.Keys, stashes []EvictionSource) (*ORAMNode, error) {
	r, trees, err := newORAMShardReplica(sh, k, shards)
	if err != nil {
		return nil, err
	}
	return &ORAMNode{sh: sh, replica: r, trees: trees, b: b, keys: keys, stashes: stashes}, nil
}

// Machine is the replica's machine, which the group's raft applies.
func (n *ORAMNode) Machine() *Replica { return n.replica }

// Lead starts the replica's term as its group's leader, once it has
// applied every entry committed before, writing to storage with fence:
// a token above every earlier leader's (durable.FenceToken of the raft
// term and the index the term starts at), claimed on each tree before
// anything else is written, so that an earlier leader's late Write is
// refused. A group whose machine no entry created writes its empty trees
// first, then is created from this replica's machine. Each tree's worker
// then issues what its machine says is outstanding (treeWorker.takeOver).
func (n *ORAMNode) Lead(ctx context.Context, g Proposer, fence uint64) error {
	workers := map[int]*treeWorker{}
	t := newTerm(n.replica, g)
	for id, tr := range n.trees {
		w, err := n.worker(id, tr, t, fence)
		if err != nil {
			return err
		}
		if err := n.b.WriteFenced(ctx, w.fence(fence), nil); err != nil {
			return fmt.Errorf("treebeard: claiming tree %d's fence: %w", id, err)
		}
		workers[id] = w
	}
	if err := n.createTrees(ctx, g, workers); err != nil {
		return err
	}
	n.mu.Lock()
	n.g, n.oram = t, &ORAM{workers: workers}
	n.mu.Unlock()
	for id, w := range workers {
		n.observe(id, w.observer)
		if w.core.leak == leakTakeoverForgetsEvictions {
			forgetEvictions(t, w.m.tree)
		}
		if err := w.takeOver(ctx); err != nil {
			return err
		}
		go w.run()
	}
	return nil
}

// createTrees writes the trees and creates the group's machine, unless
// an entry created it already.
func (n *ORAMNode) createTrees(ctx context.Context, g Proposer, workers map[int]*treeWorker) error {
	var created bool
	n.replica.view(func() { created = n.replica.created })
	if created {
		return nil
	}
	for id, w := range workers {
		if err := w.tree.Init(ctx, nil); err != nil {
			return fmt.Errorf("treebeard: writing tree %d: %w", id, err)
		}
	}
	return createOnce(n.replica, g)
}

// worker returns the driver of tree id for term t.
func (n *ORAMNode) worker(id int, tr shardTree, t *term, fence uint64) (*treeWorker, error) {
	net := newNetState()
	net.incarnation.Store(replicatedIncarnation)
	w := newTreeWorker(id, tr.machine.core, net, clockwork.NewRealClock(), defaultPartTimeout, nil)
	cfg := n.sh.treeConfig(id)
	cfg.Keys = n.keys
	cfg.Backend = backend.WithFence(n.b, func() backend.Fence { return w.fence(fence) }, &n.deposed)
	d, err := ringoram.DriverOf(tr.machine.tree, cfg)
	if err != nil {
		return nil, err
	}
	w.tree, w.stashes, w.m, w.group = d, n.stashes, tr.machine, t
	return w, nil
}

// observer is what makes w see every entry its tree's machine applies.
func (w *treeWorker) observer(in, out any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.afterApply(in.(oramEntry), out.(oramOutput))
}

// observe makes f see every input of tree id's machine and its outputs
// (nil: none). A tree's machine runs inside the shard's replica, under
// its lock (newORAMShardReplica), so the observer changes under that
// lock too.
func (n *ORAMNode) observe(id int, f func(in, out any)) {
	n.replica.view(func() { n.trees[id].replica.observe = f })
}

// fence is the tree's fence under token.
func (w *treeWorker) fence(token uint64) backend.Fence {
	return backend.Fence{Key: fencePrefix + strconv.Itoa(w.id), Token: token}
}

// StepDown ends the replica's term: its workers stop, and what they wait
// for fails as lost in transit.
func (n *ORAMNode) StepDown() {
	n.mu.Lock()
	t, o := n.g, n.oram
	n.g, n.oram = nil, nil
	n.mu.Unlock()
	if t == nil {
		return
	}
	t.end()
	for id, w := range o.workers {
		n.observe(id, nil)
		w.net.stop()
		w.tree.Abandon()
		w.stop()
	}
}

// ReadPaths hands a part to the tree's worker of the term.
func (n *ORAMNode) ReadPaths(m ReadPathsMsg) ReadPathsReply {
	if o := n.leading(); o != nil {
		return o.ReadPaths(m)
	}
	return ReadPathsReply{Status: lostLead(errNotLeading)}
}

func (n *ORAMNode) Admin(m AdminMsg) AdminReply {
	if o := n.leading(); o != nil && m.Op == AdminStats {
		return o.Admin(m)
	}
	if m.Op != AdminStats {
		return unknownAdmin(LayerORAM, m.Op)
	}
	return AdminReply{Status: lostLead(errNotLeading)}
}

// leading returns the term's shard, nil while the replica does not lead.
func (n *ORAMNode) leading() *ORAM {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.oram
}
