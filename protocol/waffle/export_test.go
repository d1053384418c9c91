package waffle

// Ref names a logical object: a key, or a dummy (Key is then its id).
type Ref = ref

// TracedBatch is a batch as a traced store reports it (trace.go).
type TracedBatch = batchTrace

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
