package taostore

import (
	"fmt"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Options are TaoStore's parameters. A zero field takes the default its
// `default` tag states: the paper's (Sec. V-B).
type Options struct {
	// Z is the number of blocks per bucket (Sec. V-B).
	Z int `opt:"Blocks per bucket." default:"4"`
	// K is the write-back threshold: the number of flushed paths after
	// which they are written back (Sec. V-B).
	K int `opt:"Write-back threshold: flushed paths after which they are written back." default:"40"`
	// CachedLevels is the number of top tree levels kept in proxy memory
	// and never sent to storage (Sec. IV-D); zero: none.
	CachedLevels int `opt:"Top tree levels kept in proxy memory and never sent to storage." default:"0"`

	// TestingKnobs are hooks for tests, never options.
	TestingKnobs TestingKnobs
}

// TestingKnobs are hooks for tests. They are no options: kv/options sets
// only the int, float64 and time.Duration fields of Options itself, so
// --opt cannot reach them, and a store never records them. The hooks are
// called under the store's lock.
type TestingKnobs struct {
	// Seed, when set, makes the leaf choices reproducible.
	Seed *[32]byte
	// Leak injects a flaw on purpose, to show that an audit catches it
	// (leak.go); zero is the protocol as specified. Outside this package
	// only tests name a leak (through export_test.go); the oblivkv_leaks
	// build chooses one from the environment (leak_env.go).
	Leak leak
	// Released is told the arrival number (0 for the first request) of
	// every reply the Sequencer lets out, in the order it lets them out.
	Released func(arrival uint64)
	// Handled is told the arrival number of every request whose path read
	// the Processor has handled (answered if it could, flushed, maybe
	// written back), once the Sequencer has let out the replies it could.
	Handled func(arrival uint64)
	// Trace is told every path read planned, in order, before it is
	// issued: its leaf, its block and whether it is the block's real
	// read, the ground truth of which read was which key's.
	Trace func(leaf uint64, id tree.BlockID, real bool)
}

// Defaults from the paper's evaluation (Sec. V-B).
const (
	DefaultZ = 4
	DefaultK = 40
)

// EnsureDefaults returns o with its zero fields at their defaults, which
// do not depend on the capacity: the public parameters the store runs
// with, which an audit checks storage's view against.
func (o Options) EnsureDefaults(int) Options {
	if o.Z == 0 {
		o.Z = DefaultZ
	}
	if o.K == 0 {
		o.K = DefaultK
	}
	return o
}

// Validate reports options a store of capacity n cannot run with.
func (o Options) Validate(n int) error {
	levels := tree.NewGeometry(n).L + 1
	switch {
	case o.Z < 1 || o.Z > 64:
		return fmt.Errorf("taostore: Z must be between 1 and 64, got %d", o.Z)
	case o.K < 1:
		return fmt.Errorf("taostore: the write-back threshold K must be at least 1, got %d", o.K)
	case o.CachedLevels < 0 || o.CachedLevels >= levels:
		return fmt.Errorf("taostore: CachedLevels must be between 0 and %d (the tree has %d levels), got %d", levels-1, levels, o.CachedLevels)
	}
	return nil
}
