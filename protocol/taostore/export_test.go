package taostore

import (
	"context"

	"github.com/oblivkv/oblivkv/kv"
)

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

// OpenRaw opens the protocol's store itself, with env as given, so a test
// can hold the journal and crash it.
func OpenRaw(ctx context.Context, env kv.Env) (kv.Store, error) { return open(ctx, env) }

// CheckpointEvery makes a store opened by OpenRaw checkpoint every n
// journal records.
func CheckpointEvery(s kv.Store, n uint64) { s.(*store).log.SetEvery(n) }

// CheckpointUnnamed checkpoints a store opened by OpenRaw as an earlier
// build did: with no names (gob writes no empty map, so the checkpoint
// holds no Names field, as that build's did not).
func CheckpointUnnamed(ctx context.Context, s kv.Store) error {
	st := s.(*store)
	st.mu.Lock()
	clear(st.names)
	st.mu.Unlock()
	return st.checkpoint(ctx)
}
