package taostore_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/taostore"
)

// TestFreshChoices: two stores given one test seed show storage the same
// choices, two with default options different ones; a store whose
// production seed is constant (leakFixedSeed) fails it.
func TestFreshChoices(t *testing.T) {
	kvtest.CheckFreshChoices(t, choices(taostore.NoLeak), choices(taostore.LeakFixedSeed))
}

func choices(lk taostore.Leak) kvtest.Choices {
	return kvtest.Choices{Protocol: "taostore", Options: func(seed *[32]byte) any {
		return taostore.Options{TestingKnobs: taostore.TestingKnobs{Seed: seed, Leak: lk}}
	}}
}
