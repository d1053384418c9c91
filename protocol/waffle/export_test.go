package waffle

// Ref names a logical object: a key, or a dummy (Key is then its id).
type Ref = ref

// Traced returns o reporting every batch to fn, after the batch's backend
// calls succeeded: its timestamp, the B objects it read from storage and
// the B it wrote (re-encrypted dummies and cache victims). fn is called
// from the batching goroutine, one batch at a time.
func Traced(o Options, fn func(ts uint64, read, written []Ref)) Options {
	o.trace = fn
	return o
}

// Leak is a flaw injected on purpose (leak.go).
type Leak = leak

// The injectable leaks (leak.go).
const (
	NoLeak                  = noLeak
	LeakRealKeepsID         = leakRealKeepsID
	LeakReadInPlanOrder     = leakReadInPlanOrder
	LeakDummiesWrittenFirst = leakDummiesWrittenFirst
	LeakFixedFill           = leakFixedFill
	LeakRandomFakes         = leakRandomFakes
	LeakFixedSeed           = leakFixedSeed
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
