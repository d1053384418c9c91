package treebeard

import (
	"context"

	"github.com/oblivkv/oblivkv/kv"
)

// TraceEvent is traceEvent for the external tests.
type TraceEvent = traceEvent

// Trace kinds.
const (
	TraceEpoch = traceEpoch
	TraceRead  = traceRead
	TraceEvict = traceEvict
)

// Leak is an injected flaw (leak.go), for the audits' leak tests.
type Leak = leak

// The leaks.
const (
	LeakRepeatReadsRealPath  = leakRepeatReadsRealPath
	LeakMissingKeyedPosition = leakMissingKeyedPosition
	LeakEvictOnRealReads     = leakEvictOnRealReads
	LeakEagerShardParts      = leakEagerShardParts
	LeakKeyedRemap           = leakKeyedRemap
	LeakRemapKeepsTree       = leakRemapKeepsTree

	LeakRecoveryForgetsEvictions = leakRecoveryForgetsEvictions
	LeakRecoveryChecksPositions  = leakRecoveryChecksPositions
	LeakRecoveryForgetsPlans     = leakRecoveryForgetsPlans
	LeakFixedSeed                = leakFixedSeed
)

// OpenRaw opens the protocol's store itself, with env as given, so a test
// can hold the journal and crash it.
func OpenRaw(ctx context.Context, env kv.Env) (kv.Store, error) { return open(ctx, env) }

// Quiesce waits until every tree of a store opened by OpenRaw has finished
// its reads and evictions.
func Quiesce(s kv.Store) {
	for _, w := range s.(*store).workers {
		w.waitIdle()
	}
}

// CheckpointUnnamed checkpoints every machine of a store opened by
// OpenRaw, once its trees are idle, as an earlier build did: with no
// keys' names (gob writes no false flag and no empty name, so the Stash
// shards' checkpoints hold none, as that build's did not).
func CheckpointUnnamed(ctx context.Context, ks kv.Store) error {
	Quiesce(ks)
	s := ks.(*store)
	for _, st := range s.stashes {
		st.mu.Lock()
		clear(st.core.names)
		st.mu.Unlock()
	}
	return s.checkpointAll(ctx, s.initialised.Load())
}
