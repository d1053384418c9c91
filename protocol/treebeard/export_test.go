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

// Epochs ends the epochs of a store opened with ManualEpochs.
type Epochs struct{ c *EpochControl }

// ManualEpochs returns o with the Routers' epochs off the clock, and the
// control that ends them.
func ManualEpochs(o Options) (Options, Epochs) {
	c := &EpochControl{}
	return o.WithEpochControl(c), Epochs{c}
}

// Collecting returns the number of requests the current epochs hold.
func (e Epochs) Collecting() int { return e.c.Collecting() }

// End ends the current epochs: their requests go to the Stash shards.
func (e Epochs) End() { e.c.End() }

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
