package oblivistore

// leak is a flaw injected on purpose, to show that an audit catches it
// (audit_test.go). Tests set it as Options.TestingKnobs.Leak, and the
// oblivkv_leaks build from the environment (leak_env.go); the zero value,
// leakNone, is the protocol as specified. The type is unexported: outside
// the package, only tests name another, through export_test.go.
type leak uint8

const (
	leakNone leak = iota
	// leakRepeatReadsReal: an access to a block held in trusted memory
	// (read from storage, not evicted since) reads the slot it came from
	// again, while that slot's level stands, instead of reading fake, so
	// storage sees one slot read twice.
	leakRepeatReadsReal
	// leakSkipsEmptyReads: an access to a key that does not exist reads
	// nothing, so storage sees existence.
	leakSkipsEmptyReads
	// leakStopsAtReal: a partition read stops at the level holding the
	// block, so storage sees at which level it was.
	leakStopsAtReal
	// leakKeyedPartition: the partition a block is assigned to at each
	// access is derived from its key instead of drawn afresh, so every
	// access of a key after its first reads the same partition.
	leakKeyedPartition
	// leakLevelUnpermuted: the shuffler writes a level's real blocks in
	// the order it gathered them, in the level's first slots, instead of
	// permuting them with the dummies.
	leakLevelUnpermuted
	// leakDummiesInOrder: a dummy cache-in reads the level's lowest
	// unread dummy slot instead of the next in the level's random dummy
	// order.
	leakDummiesInOrder
	// leakFixedSeed: a store opened without a test seed begins its random
	// choices at a constant seed instead of random.Fresh's, so every
	// store makes the same choices and storage can predict them.
	leakFixedSeed
)

// envLeak returns l: the protocol as given. Only in builds with the
// oblivkv_leaks tag, leak_env.go replaces it with the leak the
// environment chooses (internal/testsupport/leakenv), so a test can show `oblivkv
// audit` catching it.
var envLeak = func(l leak) (leak, error) { return l, nil }
