package treebeard_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// TestFreshChoices: two stores given one test seed show storage the same
// choices, two with default options different ones; a store whose
// production seed is constant (leakFixedSeed) fails it.
func TestFreshChoices(t *testing.T) {
	kvtest.CheckFreshChoices(t, choices(0), choices(treebeard.LeakFixedSeed))
}

func choices(lk treebeard.Leak) kvtest.Choices {
	return kvtest.Choices{Protocol: "treebeard", Options: func(seed *[32]byte) any {
		return treebeard.Options{TestingKnobs: treebeard.TestingKnobs{Seed: seed, Leak: lk}}
	}}
}
