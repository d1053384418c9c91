package tree

import "sync/atomic"

// leak is a flaw injected on purpose, to show that a test catches it
// (tamper_test.go). The zero value, noLeak, is the codec as specified.
// The protocols build their codecs themselves, so a leak is chosen for
// every Codec made afterwards, in this package's tests only (through
// export_test.go): nothing outside them can choose one.
type leak uint32

const (
	noLeak leak = iota
	// leakUnboundAddress: a slot's seal binds the bucket's version and the
	// slot's index but not the bucket's address, as if the version alone
	// made a bucket unique: storage can move a sealed bucket (or a slot)
	// to another bucket of the same version, and the store takes it for
	// that bucket's.
	leakUnboundAddress
)

// injected is the leak NewCodec gives a Codec.
var injected atomic.Uint32
