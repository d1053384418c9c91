package ringoram

// leak is a flaw injected on purpose, to show that an audit catches it
// (random_test.go). Only this package's tests set Tree.leak; the zero
// value, noLeak, is Ring ORAM as specified, and nothing outside the
// package can choose another.
type leak uint8

const (
	noLeak leak = iota
	// leakRealsInFirstSlots: a rewrite puts a bucket's real blocks in its
	// lowest free slots instead of uniformly random ones (the permuted
	// buckets invariant), so a path read's slot offset tells a real block
	// from a dummy.
	leakRealsInFirstSlots
	// leakDummiesInOrder: a path read takes a bucket's lowest unread
	// dummy slot instead of a uniformly random one, so a read of any
	// other slot is a real block's, and the slots reads skip hold real
	// blocks.
	leakDummiesInOrder
)
