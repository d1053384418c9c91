package bench

import (
	"context"
	"sync/atomic"
	"time"
)

// schedule hands out the operations of one phase to the workers.
//
// Closed loop (rate 0): an operation's intended start is the moment a
// worker claims it, so each worker issues its next operation as soon as
// the previous one returns.
//
// Open loop (rate > 0): operation i is due at start + i/rate whatever
// happened before; a worker claims the next operation, sleeps until it is
// due and runs it, and its latency counts from when it was due, not from
// when it was sent. A store that falls behind therefore shows its queueing
// delay in the latencies (no coordinated omission); the number of workers
// bounds the operations outstanding at once.
type schedule struct {
	start    time.Time
	ops      int64 // operations in the phase, or 0 for a timed phase
	deadline time.Time
	interval time.Duration // 0 in a closed loop

	claimed   atomic.Int64
	completed atomic.Int64
}

func newSchedule(rate float64, ops int, duration time.Duration) *schedule {
	s := &schedule{start: time.Now(), ops: int64(ops)}
	if ops <= 0 {
		s.deadline = s.start.Add(duration)
	}
	if rate > 0 {
		s.interval = time.Duration(float64(time.Second) / rate)
	}
	return s
}

// next claims an operation and returns when it is due; false when the
// phase is over.
func (s *schedule) next() (time.Time, bool) {
	i := s.claimed.Add(1) - 1
	if s.ops > 0 && i >= s.ops {
		return time.Time{}, false
	}
	due := time.Now()
	if s.interval > 0 {
		due = s.start.Add(time.Duration(i) * s.interval)
	}
	// A timed phase runs every operation due before its deadline, even one
	// that a late open loop starts after it: dropping the backlog would
	// hide the queueing the open loop exists to show.
	if s.ops <= 0 && !due.Before(s.deadline) {
		return time.Time{}, false
	}
	return due, true
}

// wait sleeps until due; false if ctx ended first.
func (s *schedule) wait(ctx context.Context, due time.Time) bool {
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// total and progress feed the progress bar: operations, or milliseconds
// for a timed phase.
func (s *schedule) total() int64 {
	if s.ops > 0 {
		return s.ops
	}
	return s.deadline.Sub(s.start).Milliseconds()
}

func (s *schedule) progress() int64 {
	if s.ops > 0 {
		return s.completed.Load()
	}
	return time.Since(s.start).Milliseconds()
}
