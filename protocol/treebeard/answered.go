package treebeard

import (
	"slices"
	"sync"
	"sync/atomic"
)

// answered is an ORAM shard's record of the parts of epochs it handled,
// by MsgID, held by its driver (a Stash shard's record of its messages is
// part of its core's state: msgTable). The first copy of a message is
// handled; every later copy gets the first one's reply, waiting for it if
// it is still being handled. A reply stays until the sender releases it
// (listing its MsgID in a later message to the same receiver); a copy
// arriving after that, however late, gets CodeUnavailable and is not
// handled. The released MsgIDs are never forgotten: they are kept per
// stream (sender, incarnation, sequence number) as runs of consecutive
// epochs (epochRuns, which msgTable keeps too), and a Stash shard's parts
// for one tree have consecutive epochs, so a stream's record stays a few
// runs long however long the store runs. The record dies with the
// process: what a reply hands over that must survive a crash, the blocks
// a read took out, the tree's machine keeps in its state and log until
// the same release, which a Stash shard sends once the part's epoch is
// journaled (handover).
type answered struct {
	mu       sync.Mutex
	entries  map[MsgID]*answer
	released map[stream]*epochRuns
	copies   atomic.Uint64
}

type answer struct {
	done  chan struct{}
	reply ReadPathsReply
}

// stream is a sender's messages of one sequence number in one
// incarnation: all but their epochs.
type stream struct {
	Sender      Endpoint
	Incarnation uint64
	Seq         uint64
}

func streamOf(id MsgID) stream { return stream{id.Sender, id.Incarnation, id.Seq} }

func newAnswered() *answered {
	return &answered{entries: map[MsgID]*answer{}, released: map[stream]*epochRuns{}}
}

// do returns the reply to message id: handle's, for its first copy.
func (a *answered) do(id MsgID, handle func() ReadPathsReply) ReadPathsReply {
	a.mu.Lock()
	if r := a.released[streamOf(id)]; r != nil && r.has(id.Epoch) {
		a.mu.Unlock()
		a.copies.Add(1)
		return ReadPathsReply{Status: Status{Code: CodeUnavailable, Detail: "treebeard: a copy of a message answered and released already"}}
	}
	if e := a.entries[id]; e != nil {
		a.mu.Unlock()
		a.copies.Add(1)
		<-e.done
		return e.reply
	}
	e := &answer{done: make(chan struct{})}
	a.entries[id] = e
	a.mu.Unlock()
	e.reply = handle()
	close(e.done)
	return e.reply
}

// release forgets the replies of ids, which their sender has; ids this
// receiver never answered are ignored.
func (a *answered) release(ids []MsgID) {
	if len(ids) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		e := a.entries[id]
		if e == nil {
			continue
		}
		select {
		case <-e.done:
		default:
			continue // still being handled: its sender has no reply yet
		}
		delete(a.entries, id)
		r := a.released[streamOf(id)]
		if r == nil {
			r = &epochRuns{}
			a.released[streamOf(id)] = r
		}
		r.add(id.Epoch)
	}
}

// held is the number of replies kept for their senders.
func (a *answered) held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}

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
