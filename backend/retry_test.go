package backend_test

import (
	"errors"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/seal"
)

// TestRetry: a call failing with a transport error is run again until it
// succeeds; tampering, a closed backend, a fenced-out write and a closed
// stop end it at once with the call's error.
func TestRetry(t *testing.T) {
	transport := errors.New("connection reset")
	for _, c := range []struct {
		name    string
		errs    []error // the call's answers, in turn (then success)
		stop    bool
		calls   int
		retries int
		want    error
	}{
		{"transport errors", []error{transport, transport}, false, 3, 2, nil},
		{"tampered", []error{seal.ErrTampered}, false, 1, 0, seal.ErrTampered},
		{"closed", []error{transport, backend.ErrClosed}, false, 2, 1, backend.ErrClosed},
		{"fenced", []error{transport, backend.Refused(backend.Fence{Key: "f", Token: 1}, 2)}, false, 2, 1, backend.ErrFenced},
		{"stopped", []error{transport}, true, 1, 0, transport},
	} {
		t.Run(c.name, func(t *testing.T) {
			stop := make(chan struct{})
			if c.stop {
				close(stop)
			}
			calls, retries := 0, 0
			err := backend.Retry(t.Context(), stop, func() { retries++ }, func() error {
				calls++
				if calls <= len(c.errs) {
					return c.errs[calls-1]
				}
				return nil
			})
			if !errors.Is(err, c.want) || err != nil && c.want == nil || calls != c.calls || retries != c.retries {
				t.Fatalf("Retry = %v after %d calls, %d retries; want %v after %d, %d", err, calls, retries, c.want, c.calls, c.retries)
			}
		})
	}
	// Without a retried function (nil) and a stop (nil), the call is run
	// again all the same.
	calls := 0
	if err := backend.Retry(t.Context(), nil, nil, func() error {
		if calls++; calls < 3 {
			return transport
		}
		return nil
	}); err != nil || calls != 3 {
		t.Fatalf("Retry with no retried and no stop = %v after %d calls; want nil after 3", err, calls)
	}
}
