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
)
