package oblivistore

// leak is a flaw injected on purpose, by tests only, to show that an
// audit catches it.
type leak uint8

const (
	leakNone leak = iota
	// leakRepeatReadsReal: a repeated access reads its block's old slot
	// again instead of a fake slot, so storage sees one slot read twice.
	leakRepeatReadsReal
	// leakSkipsEmptyReads: an access to a key that does not exist reads
	// nothing, so storage sees existence.
	leakSkipsEmptyReads
)
