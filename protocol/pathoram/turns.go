package pathoram

import (
	"sync"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// turns runs a store's operations one at a time, in the order they
// arrive (a lock that is handed over first come, first served), and
// tells the operation running what the next one is: the access running
// journals the next access's path read with its own write-back, in one
// fsync (oram.run), and the operation handed the turn next is that
// access.
type turns struct {
	mu      sync.Mutex
	busy    bool
	waiting []*turn
	queued  func() // tests only (TestingKnobs.Queued)
}

// turn is one operation's place: an access's, with its block, or an
// operation of the whole store's.
type turn struct {
	ready  chan struct{} // closed when the turn is handed over
	access bool
	block  tree.BlockID
}

// take waits for tn's turn.
func (t *turns) take(tn *turn) {
	t.mu.Lock()
	if !t.busy {
		t.busy = true
		t.mu.Unlock()
		t.told()
		return
	}
	tn.ready = make(chan struct{})
	t.waiting = append(t.waiting, tn)
	t.mu.Unlock()
	t.told()
	<-tn.ready
}

// told tells the test hook that an operation has its place.
func (t *turns) told() {
	if t.queued != nil {
		t.queued()
	}
}

// exclusive waits for a turn of an operation of the whole store; the
// caller calls done when it ends.
func (t *turns) exclusive() { t.take(&turn{}) }

// next returns the block of the access whose turn comes next, if the
// next turn is an access's.
func (t *turns) next() (tree.BlockID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiting) == 0 || !t.waiting[0].access {
		return tree.BlockID{}, false
	}
	return t.waiting[0].block, true
}

// done ends the running turn and hands over to the next.
func (t *turns) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiting) == 0 {
		t.busy = false
		return
	}
	next := t.waiting[0]
	t.waiting[0] = nil
	t.waiting = t.waiting[1:]
	close(next.ready)
}
