package taostore

import (
	"fmt"

	"github.com/oblivkv/oblivkv/kv"
)

// committer is the driver's group commit: one goroutine syncs the
// journal, and no request waits for an fsync in its own goroutine. It
// syncs every record appended so far, and at once the next group while
// records are pending, so the next group's fsync never waits for a
// request's goroutine to be scheduled; after each sync it lets out the
// path reads whose plan records it made durable and the replies whose
// path records it made durable. A read is still issued only once its
// plan is durable, and a reply leaves only once its record is durable
// and every earlier reply has left (the Sequencer, TaoStore Sec. IV-B
// step 4): what storage sees, and when a reply may leave, are unchanged.
type committer struct {
	kick    chan struct{} // records await a sync (buffered: one kick covers every append before it)
	stop    chan struct{} // closed by Close
	stopped chan struct{} // closed when the committer has ended
	plans   []*request    // requests whose plan records are not yet durable, in journal order
}

func newCommitter() committer {
	return committer{kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
}

// journal appends a record and has the committer sync it (a log that
// keeps nothing has nothing to sync); s.mu is held, so records are
// appended in the order the state changed.
func (s *store) journal(delta []byte) uint64 {
	lsn := s.log.Append(delta)
	if !s.log.Durable() {
		return lsn
	}
	select {
	case s.commit.kick <- struct{}{}:
	default: // a kick is pending, and its sync will cover this record
	}
	return lsn
}

// awaitPlan queues r until its plan record is durable (readPlanned);
// s.mu is held.
func (s *store) awaitPlan(r *request) {
	r.planned = make(chan struct{})
	s.commit.plans = append(s.commit.plans, r)
	s.releasePlans()
}

// commitLoop syncs the journal whenever records were appended, until
// Close stops it: then it stops the store, so that a request still
// waiting, or arriving later, fails (and issues no read) instead of
// waiting for a sync that never comes, and syncs once more.
func (s *store) commitLoop() {
	defer close(s.commit.stopped)
	for {
		select {
		case <-s.commit.kick:
			s.syncGroup()
		case <-s.commit.stop:
			s.mu.Lock()
			if s.broken == nil {
				s.stop(kv.ErrClosed)
			}
			s.mu.Unlock()
			s.syncGroup()
			return
		}
	}
}

// syncGroup makes every record appended so far durable with one sync,
// then lets out the reads and replies waiting for it. A failed sync stops
// the store: nothing acknowledged is lost, and nothing not durable is
// acknowledged.
func (s *store) syncGroup() {
	last := s.log.Last()
	err := s.log.Sync(last)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && s.broken == nil {
		s.stop(fmt.Errorf("taostore: store stopped: %w", err))
	}
	if err == nil {
		s.seq.durable = max(s.seq.durable, last)
	}
	s.releasePlans()
	s.seq.release()
}

// releasePlans lets out the path reads whose plan records are durable,
// or every one waiting once the store has stopped, with its error
// (readPlanned then issues none); s.mu is held.
func (s *store) releasePlans() {
	n := 0
	for _, r := range s.commit.plans {
		if s.broken == nil && r.planLSN > s.seq.durable {
			break
		}
		r.planErr = s.broken
		close(r.planned)
		n++
	}
	s.commit.plans = append(s.commit.plans[:0], s.commit.plans[n:]...)
}

// stopCommitter ends the committer once it has synced what is pending.
func (s *store) stopCommitter() {
	close(s.commit.stop)
	<-s.commit.stopped
}
