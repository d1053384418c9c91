package waffle_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/waffle"
)

// TestFreshChoices: two stores given one test seed show storage the same
// choices, two with default options different ones; a store whose
// production seed is constant (leakFixedSeed) fails it.
func TestFreshChoices(t *testing.T) {
	kvtest.CheckFreshChoices(t, choices(waffle.NoLeak), choices(waffle.LeakFixedSeed))
}

func choices(lk waffle.Leak) kvtest.Choices {
	return kvtest.Choices{Protocol: "waffle", Options: func(seed *[32]byte) any {
		return waffle.Options{TestingKnobs: waffle.TestingKnobs{Seed: seed, Leak: lk}}
	}}
}
