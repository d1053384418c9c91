package pathoram

import (
	"sync"
)

// turns runs a store's operations one at a time, in the order they
// arrive (a lock that is handed over first come, first served), and
// tells the operation running which accesses come next: the access
// running journals their path reads with its own write-back (oram.run),
// and the operations handed the turn next are those accesses, in order.
type turns struct {
	mu      sync.Mutex
	busy    bool
	waiting []*turn
	queued  func() // tests only (TestingKnobs.Queued)
}

// turn is one operation's place: an access's, with its block and
// whether it only reads it, or an operation of the whole store's.
type turn struct {
	ready  chan struct{} // closed when the turn is handed over
	access bool
	upcomingAccess
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

// upcoming returns the accesses whose turns come next, in order, up to
// n, ending at the first turn that is not an access's.
func (t *turns) upcoming(n int) []upcomingAccess {
	t.mu.Lock()
	defer t.mu.Unlock()
	var next []upcomingAccess
	for _, w := range t.waiting {
		if len(next) == n || !w.access {
			break
		}
		next = append(next, w.upcomingAccess)
	}
	return next
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
