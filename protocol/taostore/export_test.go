package taostore

import (
	"context"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Seeded returns o with reproducible leaf choices, for audits with fixed
// seeds.
func Seeded(o Options, seed byte) Options {
	var s [32]byte
	s[0] = seed
	o.seed = &s
	return o
}

// Released returns o reporting, under the store's lock, the arrival
// number (0 for the first request) of every reply the Sequencer lets out,
// in the order it lets them out.
func Released(o Options, fn func(arrival uint64)) Options {
	o.released = fn
	return o
}

// Handled returns o reporting, under the store's lock, the arrival number
// of every request whose path read the Processor has handled (answered
// if it could, flushed, maybe written back), once the Sequencer has let
// out the replies it could.
func Handled(o Options, fn func(arrival uint64)) Options {
	o.handled = fn
	return o
}

// Traced returns o reporting, under the store's lock, every path read
// planned, in order, before it is issued: its leaf, its block, and
// whether it is the block's real read.
func Traced(o Options, fn func(leaf uint64, id tree.BlockID, real bool)) Options {
	o.traced = fn
	return o
}

// Leak is leak for the external tests.
type Leak = leak

// The injected leaks (leak.go).
const (
	NoLeak                  = noLeak
	LeakRepeatReadsRealPath = leakRepeatReadsRealPath
	LeakGetKeepsLeaf        = leakGetKeepsLeaf
	LeakMissingKeyedLeaf    = leakMissingKeyedLeaf
	LeakPutWritesBack       = leakPutWritesBack
	LeakUnchangedNotWritten = leakUnchangedNotWritten
	LeakUnorderedReplies    = leakUnorderedReplies
	LeakKeyedRemap          = leakKeyedRemap
	LeakChainedRemap        = leakChainedRemap

	LeakRecoveryChecksPositions = leakRecoveryChecksPositions
	LeakRecoveryForgetsReads    = leakRecoveryForgetsReads
	LeakFixedSeed               = leakFixedSeed
)

// WithLeak returns o with leak l injected.
func WithLeak(o Options, l Leak) Options {
	o.leak = l
	return o
}

// OpenRaw opens the protocol's store itself, with env as given, so a test
// can hold the journal and crash it.
func OpenRaw(ctx context.Context, env kv.Env) (kv.Store, error) { return open(ctx, env) }

// CheckpointEvery makes a store opened by OpenRaw checkpoint every n
// journal records.
func CheckpointEvery(s kv.Store, n uint64) { s.(*store).log.SetEvery(n) }
