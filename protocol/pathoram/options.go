package pathoram

import (
	"fmt"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Options are pathoram's parameters, passed as kv.Config.Options (an
// Options or *Options; nil means the defaults). A zero field takes the
// default its `default` tag states.
type Options struct {
	// Z is the number of block slots per bucket (TaoStore Sec. IV-A). A
	// store must be reopened with the Z it was created with.
	Z int `opt:"Block slots per bucket." default:"4"`
	// BatchBytes bounds one backend write when the whole tree is written
	// (initialisation, bulk load); zero or less takes the default tag's.
	BatchBytes int `opt:"Largest backend write when the whole tree is written (initialisation, bulk load)." default:"4194304"`

	// TestingKnobs are hooks for tests, never options.
	TestingKnobs TestingKnobs
}

// TestingKnobs are hooks for tests. They are no options: kv/options sets
// only the int, float64 and time.Duration fields of Options itself, so
// --opt cannot reach them, and a store never records them.
type TestingKnobs struct {
	// Seed, when set, makes the leaf choices reproducible.
	Seed *[32]byte
	// Leak injects a flaw on purpose, to show that an audit catches it
	// (leak.go); zero is the protocol as specified. Outside this package
	// only tests name a leak (through export_test.go); the oblivkv_leaks
	// build chooses one from the environment (leak_env.go).
	Leak leak
	// Trace is told the leaf and block of every access's path read, in
	// order, before it is issued: the ground truth of which read was
	// which key's.
	Trace func(leaf uint64, id tree.BlockID)
	// Queued is told each time an operation takes its place in the
	// store's order (turns), before it waits for its turn: a test starts
	// concurrent operations in an order the store keeps.
	Queued func()
}

// DefaultZ is the default number of slots per bucket.
const DefaultZ = 4

// maxZ bounds Z: beyond it Path ORAM makes little sense and a bucket's
// slot count would overflow the state format's checks.
const maxZ = 255

// EnsureDefaults returns o with its zero fields at their defaults, which
// do not depend on the capacity.
func (o Options) EnsureDefaults(int) Options {
	if o.Z == 0 {
		o.Z = DefaultZ
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = tree.DefaultBatchBytes
	}
	return o
}

// Validate reports options a store cannot run with, at any capacity.
func (o Options) Validate(int) error {
	if o.Z < 1 || o.Z > maxZ {
		return fmt.Errorf("pathoram: Z must be between 1 and %d, got %d", maxZ, o.Z)
	}
	return nil
}
