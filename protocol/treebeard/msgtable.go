package treebeard

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// msgTable is a machine's record of the messages it handled, part of its
// state and so of every image: a Stash shard's (a Router's batches, a
// tree's eviction hand-offs and acknowledgements) and a tree's (the Stash
// shards' parts of epochs). Per stream (sender, incarnation, sequence
// number) it holds the reply of each message handled, until its sender
// releases it, and the epochs released. The first copy of a message is
// handled; a later copy gets the stored reply, or waits while the first
// is being handled; a copy of a released message, however late, is
// refused unhandled. Released epochs are kept as runs (epochRuns): a
// sender's messages to one receiver have consecutive epochs, so a
// stream's record stays a few runs long however long the store runs, and
// is never forgotten.
type msgTable struct {
	streams map[stream]*streamRecord
}

// streamRecord is one stream's part of a msgTable.
type streamRecord struct {
	released epochRuns
	held     map[uint64]*heldReply // by epoch: messages handled or being handled, not released
}

// heldReply is the reply to one message, encoded (wirecodec.go), of kind
// Kind; nil while the message is being handled.
type heldReply struct {
	Kind  msgKind
	Reply []byte
}

// msgCopy is what a copy of a message handled already gets: the stored
// reply, or Pending while the first copy is being handled, or Refused.
type msgCopy struct {
	Reply   []byte
	Pending bool
	Refused Status
}

func newMsgTable() msgTable { return msgTable{streams: map[stream]*streamRecord{}} }

// admit notes message id, whose reply is of kind, as being handled, and
// returns nil; or, when id was seen already, what its copy gets.
func (t *msgTable) admit(id MsgID, kind msgKind) *msgCopy {
	r := t.streams[streamOf(id)]
	if r == nil {
		r = &streamRecord{held: map[uint64]*heldReply{}}
		t.streams[streamOf(id)] = r
	}
	if r.released.has(id.Epoch) {
		return &msgCopy{Refused: Status{Code: CodeUnavailable, Detail: "treebeard: a copy of a message answered and released already"}}
	}
	h := r.held[id.Epoch]
	switch {
	case h == nil:
		r.held[id.Epoch] = &heldReply{Kind: kind}
		return nil
	case h.Kind != kind:
		return &msgCopy{Refused: Status{Code: CodeUnavailable, Detail: fmt.Sprintf("treebeard: message %+v came as a %v and as a %v", id, h.Kind, kind)}}
	case h.Reply == nil:
		return &msgCopy{Pending: true}
	}
	return &msgCopy{Reply: h.Reply}
}

// has reports whether message id was admitted already.
func (t *msgTable) has(id MsgID) bool {
	r := t.streams[streamOf(id)]
	return r != nil && (r.released.has(id.Epoch) || r.held[id.Epoch] != nil)
}

// answer stores the reply to message id, admitted already.
func (t *msgTable) answer(id MsgID, reply []byte) {
	if r := t.streams[streamOf(id)]; r != nil && r.held[id.Epoch] != nil {
		r.held[id.Epoch].Reply = reply
	}
}

// release forgets the reply to message id, which its sender has; a
// message never answered, or still being handled, is left as it is.
func (t *msgTable) release(id MsgID) {
	r := t.streams[streamOf(id)]
	if r == nil || r.held[id.Epoch] == nil || r.held[id.Epoch].Reply == nil {
		return
	}
	delete(r.held, id.Epoch)
	r.released.add(id.Epoch)
}

// heldCount is the number of replies held for their senders.
func (t *msgTable) heldCount() int {
	n := 0
	for _, r := range t.streams {
		n += len(r.held)
	}
	return n
}

// imageStream is one stream of a msgTable as a snapshot holds it.
type imageStream struct {
	Stream   stream
	Released []epochRun
	Held     []imageHeld
}

type imageHeld struct {
	Epoch uint64
	Kind  msgKind
	Reply []byte
}

func compareStreams(a, b stream) int {
	return cmp.Or(cmp.Compare(a.Sender.Layer, b.Sender.Layer), cmp.Compare(a.Sender.Index, b.Sender.Index),
		cmp.Compare(a.Incarnation, b.Incarnation), cmp.Compare(a.Seq, b.Seq))
}

// image returns the table, every map as a slice sorted by its key.
func (t *msgTable) image() []imageStream {
	var im []imageStream
	for _, s := range slices.SortedFunc(maps.Keys(t.streams), compareStreams) {
		r := t.streams[s]
		is := imageStream{Stream: s, Released: slices.Clone(r.released.runs)}
		for _, e := range slices.Sorted(maps.Keys(r.held)) {
			is.Held = append(is.Held, imageHeld{Epoch: e, Kind: r.held[e].Kind, Reply: r.held[e].Reply})
		}
		im = append(im, is)
	}
	return im
}

// msgTableOf rebuilds a table from its image.
func msgTableOf(im []imageStream) msgTable {
	t := newMsgTable()
	for _, is := range im {
		r := &streamRecord{released: epochRuns{runs: is.Released}, held: map[uint64]*heldReply{}}
		for _, h := range is.Held {
			r.held[h.Epoch] = &heldReply{Kind: h.Kind, Reply: h.Reply}
		}
		t.streams[is.Stream] = r
	}
	return t
}

// stream is a sender's messages of one sequence number in one
// incarnation: all but their epochs.
type stream struct {
	Sender      Endpoint
	Incarnation uint64
	Seq         uint64
}

func streamOf(id MsgID) stream { return stream{id.Sender, id.Incarnation, id.Seq} }

// epochRuns is a set of epochs as sorted, disjoint, non-adjacent runs.
type epochRuns struct{ runs []epochRun }

// epochRun is the epochs from From up to, not including, To.
type epochRun struct{ From, To uint64 }

// at returns the index of the first run that begins after e.
func (r *epochRuns) at(e uint64) int {
	i, _ := slices.BinarySearchFunc(r.runs, e, func(run epochRun, e uint64) int {
		if run.From <= e {
			return -1
		}
		return 1
	})
	return i
}

func (r *epochRuns) has(e uint64) bool {
	i := r.at(e)
	return i > 0 && e < r.runs[i-1].To
}

func (r *epochRuns) add(e uint64) {
	if r.has(e) {
		return
	}
	i := r.at(e)
	joinsPrev := i > 0 && r.runs[i-1].To == e
	joinsNext := i < len(r.runs) && r.runs[i].From == e+1
	switch {
	case joinsPrev && joinsNext:
		r.runs[i-1].To = r.runs[i].To
		r.runs = slices.Delete(r.runs, i, i+1)
	case joinsPrev:
		r.runs[i-1].To = e + 1
	case joinsNext:
		r.runs[i].From = e
	default:
		r.runs = slices.Insert(r.runs, i, epochRun{e, e + 1})
	}
}

// answeredImage is the table's image without the messages still being
// handled, whose first copies a checkpoint does not keep.
func (t *msgTable) answeredImage() []imageStream {
	im := t.image()
	for i := range im {
		im[i].Held = slices.DeleteFunc(im[i].Held, func(h imageHeld) bool { return h.Reply == nil })
	}
	return im
}
