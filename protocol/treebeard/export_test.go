package treebeard

// Seeded returns o with reproducible tree, leaf and slot choices, for
// audits with fixed seeds.
func Seeded(o Options, seed byte) Options {
	var s [32]byte
	s[0] = seed
	o.seed = &s
	return o
}

// TraceEvent is traceEvent for the external tests.
type TraceEvent = traceEvent

// Trace kinds.
const (
	TraceEpoch = traceEpoch
	TraceRead  = traceRead
	TraceEvict = traceEvict
)

// Traced returns o reporting what the trusted layers do to fn (called
// from many goroutines).
func Traced(o Options, fn func(TraceEvent)) Options {
	o.trace = fn
	return o
}
