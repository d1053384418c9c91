package taostore

import (
	"fmt"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Options are TaoStore's parameters. Zero fields take the paper's defaults.
type Options struct {
	// Z is the number of blocks per bucket (default 4, Sec. V-B).
	Z int `opt:"Blocks per bucket." default:"4"`
	// K is the write-back threshold: the number of flushed paths after
	// which they are written back (default 40, Sec. V-B).
	K int `opt:"Write-back threshold: flushed paths after which they are written back." default:"40"`
	// CachedLevels is the number of top tree levels kept in proxy memory
	// and never sent to storage (Sec. IV-D; default 0: none).
	CachedLevels int `opt:"Top tree levels kept in proxy memory and never sent to storage." default:"0"`

	seed     *[32]byte            // tests only: makes leaf choices reproducible
	released func(arrival uint64) // tests only: the Sequencer's releases, in order
	handled  func(arrival uint64) // tests only: each request whose path read was handled, after the Sequencer's releases
	leak     leak                 // tests only: a flaw injected to show an audit catches it
	// traced, tests only, is told every path read planned, in order,
	// before it is issued: its leaf, its block and whether it is the
	// block's real read, the ground truth of which read was which key's.
	traced func(leaf uint64, id tree.BlockID, real bool)
}

// Defaults from the paper's evaluation (Sec. V-B).
const (
	DefaultZ = 4
	DefaultK = 40
)

// WithDefaults returns o with its zero fields at the defaults: the public
// parameters the store runs with, which an audit checks storage's view
// against.
func (o Options) WithDefaults() Options {
	if o.Z == 0 {
		o.Z = DefaultZ
	}
	if o.K == 0 {
		o.K = DefaultK
	}
	return o
}

func (o Options) validate(levels int) error {
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
