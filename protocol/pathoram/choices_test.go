package pathoram

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestFreshChoices: two stores given one test seed show storage the same
// choices, two with default options different ones; a store whose
// production seed is constant (leakFixedSeed) fails it.
func TestFreshChoices(t *testing.T) {
	choices := func(lk leak) kvtest.Choices {
		return kvtest.Choices{Protocol: "pathoram", Options: func(seed *[32]byte) any { return Options{TestingKnobs: TestingKnobs{Seed: seed, Leak: lk}} }}
	}
	kvtest.CheckFreshChoices(t, choices(noLeak), choices(leakFixedSeed))
}
