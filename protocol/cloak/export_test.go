package cloak

import (
	"context"

	"github.com/oblivkv/oblivkv/kv"
)

// OpenRaw opens the protocol's store itself, without package kv's checks,
// so a test can look inside it with Where, and starts its batches.
func OpenRaw(ctx context.Context, env kv.Env) (kv.Store, error) {
	s, err := open(ctx, env)
	if err != nil {
		return nil, err
	}
	s.Start()
	return s, nil
}

// Where returns the storage address of key in a store OpenRaw opened, or
// "" if it has none: the ground truth a frequency attack is scored on.
func Where(st kv.Store, key string) string {
	s := st.(*store)
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.where[key]; ok {
		return addr(a)
	}
	return ""
}

// Halt stops a store's batches as a crash stops them: no checkpoint, and
// its storage stays open. The store must not be used afterwards.
func Halt(st kv.Store) {
	s := st.(*store)
	close(s.stop)
	<-s.loopDone
}

// SetCheckpointEvery makes a store checkpoint every n batches.
func SetCheckpointEvery(st kv.Store, n int) {
	s := st.(*store)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkpointEvery = n
	s.log.SetEvery(uint64(n)) // for leakCheckpointByRecords
}

// RunBatch runs one batch now, as the loop does every Delta.
func RunBatch(st kv.Store) { st.(*store).runBatch(context.Background()) }

// FakeClock drives a store's batches in place of its ticker: see
// WithClock.
type FakeClock = Clock

// WithClock returns o with batches that run only when c ticks, one per
// tick.
func WithClock(o Options, c FakeClock) Options { return o.WithClock(c) }

// Leak is a flaw injected on purpose (leak.go).
type Leak = leak

// The leaks, as leak.go describes them.
const (
	NoLeak                  = noLeak
	LeakWriteBackInPlace    = leakWriteBackInPlace
	LeakPublicTieOrder      = leakPublicTieOrder
	LeakSkipIdle            = leakSkipIdle
	LeakEarlyWhenFull       = leakEarlyWhenFull
	LeakDrainQueue          = leakDrainQueue
	LeakCheckpointByRecords = leakCheckpointByRecords
	LeakKeyedReadOrder      = leakKeyedReadOrder
	LeakKeyedWriteBack      = leakKeyedWriteBack
	LeakRealsInTakeOrder    = leakRealsInTakeOrder
	LeakFixedSeed           = leakFixedSeed
	LeakUnversionedSeal     = leakUnversionedSeal
)

// TracedBatch is a batch as a traced store reports it (trace.go).
type TracedBatch = batchTrace
