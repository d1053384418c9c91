package treebeard

import (
	"sync"
	"sync/atomic"
)

// maxReleased is how many released MsgIDs a receiver remembers, to refuse
// a copy of a message that arrives after its sender got the reply. A
// transport delivers every copy of a message before the sender has its
// reply (the tests' one holds a call until then); this bounds the harm of
// one that does not.
const maxReleased = 1 << 12

// answered is a receiver's record of the messages it handled, by MsgID.
// The first copy of a message is handled; every later copy gets the first
// one's reply, waiting for it if it is still being handled. An entry stays
// until the sender releases it (listing its MsgID in a later message to
// the same receiver); a copy arriving after that gets CodeUnavailable and
// is not handled.
type answered[R any, P reply[R]] struct {
	mu       sync.Mutex
	entries  map[MsgID]*answer[R]
	released map[MsgID]bool
	order    []MsgID // released, oldest first
	copies   atomic.Uint64
}

type answer[R any] struct {
	done  chan struct{}
	reply R
}

func newAnswered[R any, P reply[R]]() *answered[R, P] {
	return &answered[R, P]{entries: map[MsgID]*answer[R]{}, released: map[MsgID]bool{}}
}

// do returns the reply to message id: handle's, for its first copy.
func (a *answered[R, P]) do(id MsgID, handle func() R) R {
	a.mu.Lock()
	if a.released[id] {
		a.mu.Unlock()
		a.copies.Add(1)
		return failedWith[R, P](Status{Code: CodeUnavailable, Detail: "treebeard: a copy of a message answered and released already"})
	}
	if e := a.entries[id]; e != nil {
		a.mu.Unlock()
		a.copies.Add(1)
		<-e.done
		return e.reply
	}
	e := &answer[R]{done: make(chan struct{})}
	a.entries[id] = e
	a.mu.Unlock()
	e.reply = handle()
	close(e.done)
	return e.reply
}

// release forgets the replies of ids, which their sender has; ids this
// receiver never answered are ignored.
func (a *answered[R, P]) release(ids []MsgID) {
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
		a.released[id] = true
		a.order = append(a.order, id)
		if len(a.order) > maxReleased {
			delete(a.released, a.order[0])
			a.order = a.order[1:]
		}
	}
}

// held is the number of replies kept for their senders.
func (a *answered[R, P]) held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}
