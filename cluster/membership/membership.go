// Package membership changes which replicas make up a cluster's groups
// while the cluster runs: the operator's requests to add a replica to a
// group (raft's AddVoter), to remove one (RemoveServer), and to list a
// group's members.
//
// It owns the requests' form on the wire (rpc kinds of their own,
// outside treebeard's, sealed under the store key), the side of a
// replica that answers them (Handler, in front of the process's own
// rpc.Handler: it takes them only from the operator's certificate,
// cluster.AdminID, and changes a group only on its leader), and the
// operator's side (Admin: it finds a group's leader, asks it, and waits
// for a new replica to catch up). So only a holder of both the admin
// certificate and the store key changes a group. It never edits the
// configuration file and never starts or stops a process: the operator
// does (docs/OPERATIONS.md, "Adding and removing a replica").
package membership

import (
	"encoding/json"
	"fmt"

	"github.com/oblivkv/oblivkv/cluster/raftgroup"
	"github.com/oblivkv/oblivkv/cluster/rpc"
	"github.com/oblivkv/oblivkv/seal"
)

// The rpc kinds of membership's messages: above every treebeard kind
// (one byte), so the two never meet.
const (
	KindRequest uint32 = 1<<16 + iota
	KindReply
)

// Op is what a Request asks.
type Op string

// The operations.
const (
	OpMembers Op = "members" // the group's members and the replica's own state, on any replica
	OpAdd     Op = "add"     // add replica ID at Raft as a voter, on the leader
	OpRemove  Op = "remove"  // remove replica ID, on the leader
	OpLeave   Op = "leave"   // the replica asked was removed: it stops (Admin.Remove, after the change)
)

// Request is one of the operator's requests.
type Request struct {
	Op   Op     `json:"op"`
	ID   string `json:"id,omitempty"`   // the replica added or removed
	Raft string `json:"raft,omitempty"` // the raft address of the replica added
}

// Reply is a replica's answer: its own state after the request, and its
// group as it knows it.
type Reply struct {
	Self State `json:"self"`
	// Leader is the id of the group's leader as the replica knows it.
	Leader string `json:"leader"`
	// Members are the group's replicas in raft's latest configuration.
	Members []raftgroup.Peer `json:"members"`
	// Changed says whether an add or a remove changed the group (false:
	// the replica was already a member, or already was not).
	Changed bool `json:"changed"`
}

// State is one replica's raft state.
type State struct {
	ID          string `json:"id"`
	State       string `json:"state"` // Leader, Follower, Candidate or Shutdown
	Term        uint64 `json:"term"`
	CommitIndex uint64 `json:"commit_index"`
	// AppliedIndex is the last entry the replica applied: a replica
	// added has caught up once it reaches the leader's commit index.
	AppliedIndex uint64 `json:"applied_index"`
}

// adOf binds a sealed request or reply to its kind and to the process it
// is for or from.
func adOf(kind uint32, process string) []byte {
	return fmt.Appendf(nil, "oblivkv membership %d %s", kind, process)
}

// sealMessage seals v, a Request or a Reply, as a message of kind for or
// from process.
func sealMessage(keys *seal.Keys, kind uint32, process string, v any) (rpc.Message, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return rpc.Message{}, err
	}
	return rpc.Message{Kind: kind, Sealed: keys.Seal(nil, adOf(kind, process), plain)}, nil
}

// openMessage opens m, which must be of kind, for or from process, into
// v.
func openMessage(keys *seal.Keys, m rpc.Message, kind uint32, process string, v any) error {
	if m.Kind != kind {
		return fmt.Errorf("membership: a message of kind %d where %d was due", m.Kind, kind)
	}
	plain, err := keys.Open(nil, adOf(kind, process), m.Sealed)
	if err != nil {
		return fmt.Errorf("membership: a message that does not open under the store key: %w", err)
	}
	return json.Unmarshal(plain, v)
}
