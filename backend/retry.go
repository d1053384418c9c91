package backend

import (
	"context"
	"errors"
	"time"

	"github.com/oblivkv/oblivkv/seal"
)

// Pauses between two attempts of a call that storage failed.
const (
	firstRetry = time.Millisecond
	maxRetry   = time.Second
)

// Retry runs call, and while it fails with a transport error (not
// tampering, seal.ErrTampered; not a closed backend, ErrClosed; not a
// write a newer driver fenced out, ErrFenced) runs it
// again, unchanged, pausing from 1 ms doubling to 1 s, until it succeeds,
// ctx ends or stop (which may be nil) is closed; retried, unless nil, is
// called before each new attempt. It returns call's last error.
//
// A call that failed may have reached storage, so the addresses it chose
// are spent: a protocol that chose again would show storage a wanted
// place a second time beside fresh choices, and storage would link the
// two (Treebeard Sec. 5.3.3). The same call again shows it only that a
// call failed.
func Retry(ctx context.Context, stop <-chan struct{}, retried func(), call func() error) error {
	wait := firstRetry
	for {
		err := call()
		if err == nil || errors.Is(err, seal.ErrTampered) || errors.Is(err, ErrClosed) || errors.Is(err, ErrFenced) || stopped(ctx, stop) {
			return err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-stop:
			timer.Stop()
			return err
		case <-timer.C:
		}
		if retried != nil {
			retried()
		}
		wait = min(2*wait, maxRetry)
	}
}

// stopped reports whether ctx has ended or stop is closed.
func stopped(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case <-ctx.Done():
		return true
	case <-stop:
		return true
	default:
		return false
	}
}
