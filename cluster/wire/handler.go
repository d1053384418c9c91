package wire

import (
	"context"
	"fmt"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/rpc"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// Handler is a process's rpc.Handler: it hands each message to the
// process's Receiver, while the process leads the group that serves the
// message's receiver.
type Handler struct {
	live  *cluster.Live
	recv  *treebeard.Receiver
	leads func(treebeard.Endpoint) (leads bool, leader string)
}

// NewHandler returns the Handler of a process of the cluster live
// describes that serves its endpoints with recv. leads says whether the process now serves an
// endpoint (it leads its group) and, when it does not, the process id of
// the leader if it knows it.
func NewHandler(live *cluster.Live, recv *treebeard.Receiver, leads func(treebeard.Endpoint) (leads bool, leader string)) *Handler {
	return &Handler{live: live, recv: recv, leads: leads}
}

// Handle answers the message m from process from (the id its
// certificate names). It refuses a message its sender may not send (a
// process sends only as the endpoints it may speak for, and a message's
// From is its id's sender); on a replica that does not lead the
// receiver's group it answers an *rpc.NotLeaderError; and it refuses a
// message the Receiver serves nothing for (the sender takes it as lost
// in transit).
func (h *Handler) Handle(_ context.Context, from string, m rpc.Message) (rpc.Message, error) {
	in, err := decode(m)
	if err != nil {
		return rpc.Message{}, err
	}
	if in.From != in.ID.Sender || !h.maySendAs(from, in.From) {
		return rpc.Message{}, fmt.Errorf("wire: process %q may not send a %v as %v (id of %v)", from, in.Kind, in.From, in.ID.Sender)
	}
	if leads, leader := h.leads(in.To); !leads {
		return rpc.Message{}, &rpc.NotLeaderError{Leader: leader}
	}
	out, err := h.recv.Receive(in)
	if err != nil {
		return rpc.Message{}, err
	}
	return encode(out)
}

// maySendAs reports whether process id may send as endpoint e, reading
// the configuration file again if the one in use refuses it (id may be
// a replica added since).
func (h *Handler) maySendAs(id string, e treebeard.Endpoint) bool {
	_, ok := cluster.Find(h.live, func(c *cluster.Config) (struct{}, bool) { return struct{}{}, maySendAs(c, id, e) })
	return ok
}
