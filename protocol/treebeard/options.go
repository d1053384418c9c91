package treebeard

import (
	"fmt"
	"time"

	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Options are Treebeard's parameters. Zero fields take the defaults below,
// which are the paper's (Sec. 7, "Experimental Setup": S=6, A=100, k=200,
// 1 ms epochs, Z=1 from Sec. 5.3.1) and, for the layer sizes, what suits
// one process on a small machine.
type Options struct {
	// Routers is the number of Router instances requests are spread over
	// (default 1).
	Routers int
	// StashShards is the number of Stash shards keys are hashed to
	// (default 2).
	StashShards int
	// ORAMShards is the number of ORAM shards; tree t belongs to shard
	// t mod ORAMShards (default 2, at most Trees).
	ORAMShards int
	// Trees is the number of storage trees (default 4).
	Trees int
	// Z is the number of real blocks per bucket. Treebeard reads many paths
	// at once and so needs Z=1 (Sec. 5.3.1, second approach); it is the
	// only value accepted.
	Z int
	// S is the number of dummy slots per bucket (default 6); a bucket is
	// reshuffled after S reads.
	S int
	// A is the number of path reads of a tree after which k of its paths
	// are evicted (default 100).
	A int
	// K is the number of paths evicted every A reads of a tree (default
	// 200).
	K int
	// Epoch is how long a Router collects requests before forwarding them
	// (default 1 ms; negative: forward every request at once).
	Epoch time.Duration

	seed  *[32]byte        // tests only: reproducible tree, leaf and slot choices
	trace func(traceEvent) // tests only: what the trusted layers did
	leak  leak             // tests only: a flaw injected to show an audit catches it (leak.go)
	// epochs, when set (tests only), takes the Routers' epochs off the
	// clock: an epoch ends when the test calls epochs.end, so audits get
	// the same epochs on a loaded machine as on an idle one.
	epochs *epochControl
}

// Defaults.
const (
	DefaultRouters     = 1
	DefaultStashShards = 2
	DefaultORAMShards  = 2
	DefaultTrees       = 4
	DefaultA           = 100
	DefaultK           = 200
	DefaultEpoch       = time.Millisecond
)

func (o Options) withDefaults() Options {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&o.Routers, DefaultRouters)
	set(&o.StashShards, DefaultStashShards)
	set(&o.Trees, DefaultTrees)
	set(&o.ORAMShards, min(DefaultORAMShards, o.Trees))
	set(&o.Z, ringoram.DefaultZ)
	set(&o.S, ringoram.DefaultS)
	set(&o.A, DefaultA)
	set(&o.K, DefaultK)
	if o.Epoch == 0 {
		o.Epoch = DefaultEpoch
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Routers < 1 || o.StashShards < 1 || o.Trees < 1:
		return fmt.Errorf("treebeard: Routers, StashShards and Trees must be at least 1 (got %d, %d, %d)", o.Routers, o.StashShards, o.Trees)
	case o.ORAMShards < 1 || o.ORAMShards > o.Trees:
		return fmt.Errorf("treebeard: ORAMShards must be between 1 and Trees (%d), got %d", o.Trees, o.ORAMShards)
	case o.Z != 1:
		return fmt.Errorf("treebeard: Z must be 1 (multi-path reads read one slot per bucket, Sec. 5.3.1), got %d", o.Z)
	case o.S < 1 || o.Z+o.S > 64:
		return fmt.Errorf("treebeard: S must be between 1 and %d, got %d", 64-o.Z, o.S)
	case o.A < 1 || o.K < 1:
		return fmt.Errorf("treebeard: A and K must be at least 1 (got %d, %d)", o.A, o.K)
	}
	return nil
}

// geometry returns the shape of each storage tree for capacity blocks over
// trees trees. Blocks go to uniformly random trees, so a tree holds
// capacity/trees blocks on average; each tree gets the smallest power of
// two of leaves at least that, hence at least two buckets (two real slots,
// Z=1) per block it holds on average. That margin absorbs the random
// imbalance between trees (a standard deviation of sqrt(capacity/trees)
// blocks) and keeps evictions finding free slots, so the stash stays small.
func geometry(capacity, trees int) tree.Geometry {
	return tree.NewGeometry((capacity + trees - 1) / trees)
}
