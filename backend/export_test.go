package backend

import (
	"context"
	"time"
)

// WithLatencyClock is WithLatency with sleep in place of the timer, so a
// test drives the delay with a fake clock.
func WithLatencyClock(b Backend, d time.Duration, sleep func(ctx context.Context, d time.Duration) error) Backend {
	l := WithLatency(b, d).(*latency)
	l.sleep = sleep
	return l
}
