package cloak

import (
	"context"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
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

// FakeClock is a fake clock a store's batches run on
// (TestingKnobs.Clock): each Tick is one batch interval.
type FakeClock struct{ c batchClock }

// OnFakeClock returns o with its batches on a new FakeClock, and the
// clock.
func OnFakeClock(o Options) (Options, FakeClock) {
	o, c := onBatchClock(o)
	return o, FakeClock{c}
}

// Tick advances the clock by one batch interval and returns once s has
// handled the tick: one batch, busy or idle.
func (c FakeClock) Tick(t testing.TB, s kv.Store) {
	t.Helper()
	if err := c.c.tick(t.Context(), func(name string) float64 { return kvtest.Stat(t, s.Stats(), name) }); err != nil {
		t.Fatal(err)
	}
}

// Ticking reports whether the batches of the store on the clock have
// started: whether its ticker is set.
func (c FakeClock) Ticking() bool {
	now, cancel := context.WithCancel(context.Background())
	cancel() // no wait: only whether the clock has a waiter already
	return c.c.clock.BlockUntilContext(now, 1) == nil
}

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
