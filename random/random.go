// Package random owns where the protocols' secret random choices begin
// (leaves, trees, slots, permutations, partitions, dummies, fake queries):
// Fresh, the one function that reads crypto/rand for them, and the ChaCha8
// generators that descend from the seed it returns.
//
// A store calls Fresh once when it opens (through Root, which takes a
// test's seed instead where a test set one) and derives every generator
// it uses from that seed with New, Draw and Labeled, so that a journal or a
// log can replay its choices and no two stores share them. math/rand/v2's
// ChaCha8 does the drawing (fast, its state saved by MarshalBinary); what
// this package adds is one place where seeds begin, to which a test holds
// every protocol: no protocol file reads crypto/rand or builds a generator
// of its own (TestProtocolsDrawOnlyFromFresh).
//
// It must never hand out a seed crypto/rand did not supply, other than by
// derivation from one it did. A test that wants a store's choices
// reproducible gives the store a fixed seed through the protocol's own
// test-only option, never through this package.
package random

import (
	crand "crypto/rand"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
)

// Seed begins a generator.
type Seed [32]byte

// Fresh returns a seed read from crypto/rand: the beginning of a store's
// random choices.
func Fresh() (Seed, error) {
	var s Seed
	if _, err := crand.Read(s[:]); err != nil {
		return s, fmt.Errorf("random: reading crypto/rand: %w", err)
	}
	return s, nil
}

// Root returns the seed a store's choices begin at: test, where a test
// set one through the protocol's test-only option, or else Fresh's.
func Root(test *[32]byte) (Seed, error) {
	if test != nil {
		return *test, nil
	}
	return Fresh()
}

// New returns the generator that begins at s.
func New(s Seed) *rand.ChaCha8 { return rand.NewChaCha8(s) }

// Draw returns a seed drawn from src: to begin a generator of its own, or
// for an operation that records the seed it used so that a replay makes
// the same choices.
func Draw(src *rand.ChaCha8) Seed {
	var s Seed
	src.Read(s[:]) // never fails
	return s
}

// Labeled returns the generator of s under label: generators of one seed
// under different labels are independent.
func Labeled(s Seed, label string) *rand.ChaCha8 {
	return rand.NewChaCha8(sha256.Sum256(append([]byte(label), s[:]...)))
}

// Restore returns the generator whose state MarshalBinary saved in state
// (a snapshot of trusted state).
func Restore(state []byte) (*rand.ChaCha8, error) {
	src := new(rand.ChaCha8)
	if err := src.UnmarshalBinary(state); err != nil {
		return nil, fmt.Errorf("random: restoring a generator: %w", err)
	}
	return src, nil
}
