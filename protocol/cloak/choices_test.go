package cloak_test

import (
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/cloak"
)

// TestFreshChoices: two stores given one test seed show storage the same
// choices, two with default options different ones; a store whose
// production seed is constant (leakFixedSeed) fails it.
func TestFreshChoices(t *testing.T) {
	kvtest.CheckFreshChoices(t, choices(cloak.NoLeak), choices(cloak.LeakFixedSeed))
}

// choices runs the requests one at a time on a store whose batches run
// on a fake clock: while a request is in flight, a tick whenever a key
// waits for a batch, and after it, ticks until none waits, so that every
// run sends the same batches.
func choices(lk cloak.Leak) kvtest.Choices {
	var clock cloak.FakeClock
	return kvtest.Choices{
		Protocol: "cloak",
		Options: func(seed *[32]byte) any {
			var o cloak.Options
			o, clock = cloak.OnFakeClock(cloak.Options{TestingKnobs: cloak.TestingKnobs{Seed: seed, Leak: lk}})
			return o
		},
		Drive: func(t *testing.T, s kv.Store) {
			pending := func() bool { return kvtest.Stat(t, s.Stats(), "pending_keys") > 0 }
			kvtest.SerialWorkload(t, s, func(op func() error) error {
				done := make(chan error, 1)
				go func() { done <- op() }()
				for {
					select {
					case err := <-done:
						for pending() {
							clock.Tick(t, s)
						}
						return err
					default:
					}
					if pending() {
						clock.Tick(t, s)
					} else {
						time.Sleep(100 * time.Microsecond)
					}
				}
			})
		},
	}
}
