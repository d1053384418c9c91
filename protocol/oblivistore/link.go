package oblivistore

import (
	"maps"
	"slices"
)

// Link is the receiving end of one sender's messages: it hands them on in
// the sender's order, each once, whatever the order and the number of
// times they arrive. A message seen before is dropped: the sender's
// state, its sequence numbers included, is restored from its log after a
// restart, so a message sent again under a later incarnation is the same
// message, and the sequence number alone tells it. One that arrives ahead
// of its predecessors waits in Held, which is in the receiver's state and
// snapshots. Delivery is then what the protocol expects of its in-process
// queues: every message, in order, once.
type Link[M any] struct {
	// Next is the sequence number of the next message to hand on.
	Next uint64
	Held sorted[uint64, M]
}

func newLink[M any]() Link[M] { return Link[M]{Next: 1, Held: sorted[uint64, M]{}} }

// accept takes a message as it arrives and returns those now due, in
// order: none if it is a duplicate or early, else it and those held
// behind it.
func (l *Link[M]) accept(id MsgID, m M) []M {
	if id.Seq < l.Next {
		return nil
	}
	if l.Held == nil {
		l.Held = sorted[uint64, M]{}
	}
	l.Held[id.Seq] = m
	var due []M
	for {
		next, ok := l.Held[l.Next]
		if !ok {
			return due
		}
		delete(l.Held, l.Next)
		due = append(due, next)
		l.Next++
	}
}

// lacks reports whether the message id is neither handed on yet nor
// held.
func (l *Link[M]) lacks(id MsgID) bool {
	_, held := l.Held[id.Seq]
	return id.Seq >= l.Next && !held
}

// Outbox is the sending end of a link: the messages sent and not yet
// acknowledged, each in its log entry's encoding (codec.go), by sequence
// number. A receiver acknowledges every message it takes, a copy
// included, with the sequence number it has handed on up to
// (Link.handed), which only grows; a sender sends the messages still
// unacknowledged again at each Resend, with their first ids, so a message
// the network lost arrives in the end and a copy is dropped as any other.
// In one process (Core) every message is acknowledged within the Step
// that sent it.
type Outbox struct {
	Unacked sorted[uint64, []byte]
}

func newOutbox() Outbox { return Outbox{Unacked: sorted[uint64, []byte]{}} }

// hold keeps message seq, encoded, until it is acknowledged.
func (o *Outbox) hold(seq uint64, encoded []byte) { o.Unacked[seq] = encoded }

// acked forgets the messages up to seq: the receiver has them.
func (o *Outbox) acked(seq uint64) {
	for s := range o.Unacked {
		if s <= seq {
			delete(o.Unacked, s)
		}
	}
}

// pending returns the messages not yet acknowledged, encoded, in order.
func (o *Outbox) pending() [][]byte {
	seqs := slices.Sorted(maps.Keys(o.Unacked))
	out := make([][]byte, len(seqs))
	for i, s := range seqs {
		out[i] = o.Unacked[s]
	}
	return out
}

// handed is the acknowledgement a Link sends: the sequence number it has
// handed on up to.
func (l *Link[M]) handed() uint64 { return l.Next - 1 }
