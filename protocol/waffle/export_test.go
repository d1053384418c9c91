package waffle

// Ref names a logical object: a key, or a dummy (Key is then its id).
type Ref = ref

// TracedBatch is a batch as a traced store reports it (trace.go).
type TracedBatch = batchTrace

// Traced returns o reporting every batch to fn, after the batch's backend
// calls succeeded. fn is called from the batching goroutine, one batch at
// a time.
func Traced(o Options, fn func(TracedBatch)) Options {
	o.trace = fn
	return o
}

// Leak is a flaw injected on purpose (leak.go).
type Leak = leak

// The injectable leaks (leak.go).
const (
	NoLeak                     = noLeak
	LeakRealKeepsID            = leakRealKeepsID
	LeakReadInPlanOrder        = leakReadInPlanOrder
	LeakDummiesWrittenFirst    = leakDummiesWrittenFirst
	LeakFixedFill              = leakFixedFill
	LeakRandomFakes            = leakRandomFakes
	LeakKeyedReadOrder         = leakKeyedReadOrder
	LeakKeyedWriteOrder        = leakKeyedWriteOrder
	LeakVictimsInEvictionOrder = leakVictimsInEvictionOrder
	LeakRealsInPlanOrder       = leakRealsInPlanOrder
	LeakKeyedIDPrefix          = leakKeyedIDPrefix
	LeakFixedSeed              = leakFixedSeed
)

// WithSeed returns o with reproducible random choices.
func WithSeed(o Options, seed [32]byte) Options {
	o.seed = &seed
	return o
}

// WithLeak returns o with leak l injected.
func WithLeak(o Options, l Leak) Options {
	o.leak = l
	return o
}
