package oblivistore_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/oblivistore"
)

// TestFreshChoices: two stores given one test seed show storage the same
// choices, two with default options different ones; a store whose
// production seed is constant (leakFixedSeed) fails it.
func TestFreshChoices(t *testing.T) {
	kvtest.CheckFreshChoices(t, choices(0), choices(oblivistore.LeakFixedSeed))
}

// choices issues the driver's backend calls one at a time, in the
// core's order.
func choices(lk oblivistore.Leak) kvtest.Choices {
	return kvtest.Choices{Protocol: "oblivistore", Options: func(seed *[32]byte) any {
		return oblivistore.Options{TestingKnobs: oblivistore.TestingKnobs{Seed: seed, Leak: lk, SerialIO: true}}
	}}
}
