// Package wire carries treebeard's sealed messages between a cluster's
// processes over cluster/rpc: a Net, the treebeard.Network of a process,
// sends each message to the group of replicas that serves its receiver
// and follows the group's leader; a Handler, the rpc.Handler of a
// process, hands each message it receives to the process's
// treebeard.Receiver while the process leads the receiver's group.
//
// It owns the map from a treebeard endpoint to the group that serves it
// (Stash shard i: the i-th Stash group; tree t: ORAM group t mod the
// groups, as the store places trees), the connections to the replicas,
// which replica each process believes leads each group (by the group's
// index and the replica's id, which a reload of the configuration file,
// cluster.Live, keeps), and which endpoints each process may send as. It never opens, seals or alters a
// message (it reads only the kind, id and ends a Sealed carries in the
// clear), never sends one again beyond one retry at the leader a replica
// names (resending is the treebeard senders', under the message's id),
// and never hands a message to the Receiver of a replica that does not
// lead.
package wire

import (
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/rpc"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// groupOf returns the group of cfg that serves endpoint e: a Stash shard
// or a tree.
func groupOf(cfg *cluster.Config, e treebeard.Endpoint) (*cluster.Group, error) {
	switch {
	case e.Layer == treebeard.LayerStash && e.Index >= 0 && e.Index < len(cfg.Stash):
		return &cfg.Stash[e.Index], nil
	case e.Layer == treebeard.LayerORAM && e.Index >= 0 && len(cfg.ORAM) > 0:
		return &cfg.ORAM[e.Index%len(cfg.ORAM)], nil
	}
	return nil, fmt.Errorf("wire: no group of the cluster serves %v", e)
}

// groupKey names a group across reloads of the configuration (which
// never change the number of groups): its layer and index.
type groupKey struct {
	layer treebeard.Layer
	index int
}

// keyOf is the key of the group of cfg serving e, which must have one.
func keyOf(cfg *cluster.Config, e treebeard.Endpoint) groupKey {
	if e.Layer == treebeard.LayerORAM {
		return groupKey{e.Layer, e.Index % len(cfg.ORAM)}
	}
	return groupKey{e.Layer, e.Index}
}

// replicaIndex returns the index of process id among g's replicas, or -1.
func replicaIndex(g *cluster.Group, id string) int {
	return slices.IndexFunc(g.Replicas, func(r cluster.Replica) bool { return r.ID == id })
}

// maySendAs reports whether process id may send as endpoint e: router i
// as Router i; any router as the store (its loads, checkpoints, restores
// and stats: AdminMsg); a replica of the group serving a Stash shard or a
// tree as that shard or tree.
func maySendAs(cfg *cluster.Config, id string, e treebeard.Endpoint) bool {
	switch e.Layer {
	case treebeard.LayerRouter:
		return e.Index >= 0 && e.Index < len(cfg.Routers) && cfg.Routers[e.Index].ID == id
	case treebeard.LayerStore:
		return slices.ContainsFunc(cfg.Routers, func(r cluster.Router) bool { return r.ID == id })
	}
	g, err := groupOf(cfg, e)
	if err != nil {
		return false
	}
	_, ok := g.Replica(id)
	return ok
}

// encode returns s as an rpc.Message: its kind, and its encoding.
func encode(s treebeard.Sealed) (rpc.Message, error) {
	b, err := s.MarshalBinary()
	return rpc.Message{Kind: uint32(s.Kind), Sealed: b}, err
}

// decode returns the Sealed m carries, which must be of m's kind.
func decode(m rpc.Message) (treebeard.Sealed, error) {
	s, err := treebeard.UnmarshalSealed(m.Sealed)
	if err != nil {
		return treebeard.Sealed{}, err
	}
	if uint32(s.Kind) != m.Kind {
		return treebeard.Sealed{}, fmt.Errorf("wire: a %v labelled kind %d", s.Kind, m.Kind)
	}
	return s, nil
}

var (
	_ treebeard.Network = (*Net)(nil)
	_ rpc.Handler       = (*Handler)(nil)
)
