package treebeard

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// Options are Treebeard's parameters. A zero field takes the default its
// `default` tag states: for the bucket shape, the eviction rate and the
// levels held in memory, the least backend bytes per request in a sweep
// over Z, S, A, k and the cached levels that kept the stash within the
// bound of the stash tests (docs/protocols.md, "Treebeard: parameters"),
// where the paper has Z=1, S=6, A=100, k=200 and every bucket on storage
// (PaperOptions); the paper's epochs; and, for the layer sizes, what suits
// one process on a small machine.
type Options struct {
	// Routers is the number of Router instances requests are spread over.
	Routers int `opt:"Router instances requests are spread over." default:"1"`
	// StashShards is the number of Stash shards keys are hashed to.
	StashShards int `opt:"Stash shards keys are hashed to." default:"2"`
	// ORAMShards is the number of ORAM shards, at most Trees; tree t
	// belongs to shard t mod ORAMShards.
	ORAMShards int `opt:"ORAM shards; tree t belongs to shard t mod ORAMShards." default:"min(2, Trees)"`
	// Trees is the number of storage trees.
	Trees int `opt:"Storage trees." default:"8"`
	// Z is the number of real blocks per bucket (the paper's setting is 1,
	// Sec. 5.3.1). With Z > 1 a multi-path read takes up to Z slots of a
	// bucket many of its paths cross (package ringoram), and the trees
	// have proportionally fewer leaves.
	Z int `opt:"Real blocks per bucket (the paper has 1)." default:"4"`
	// S is the number of dummy slots per bucket, at least Z; a bucket is
	// reshuffled once fewer than Z of them are unread.
	S int `opt:"Dummy slots per bucket, at least Z; a bucket is reshuffled once fewer than Z of them are unread." default:"10"`
	// A is the number of path reads of a tree after which k of its paths
	// are evicted.
	A int `opt:"Path reads of a tree after which K of its paths are evicted." default:"20"`
	// K is the number of paths evicted every A reads of a tree.
	K int `opt:"Paths evicted every A reads of a tree." default:"5"`
	// CachedLevels is how many levels of each tree, from the root, its ORAM
	// shard holds in trusted memory instead of on storage (package
	// ringoram), at most ringoram.MaxCachedLevels and never a tree's
	// leaves; negative: none, as in the paper. Zero takes the default
	// tag's formula of each tree's height when the store is built
	// (cachedLevels): at most 1,023 buckets a tree, and at most a
	// sixteenth of its buckets, so the four deepest levels are always on
	// storage.
	CachedLevels int `opt:"Levels of each tree, from the root, held in trusted memory instead of on storage; negative: none, as in the paper." default:"min(10, tree height - 3)"`
	// Epoch is how long a Router collects requests before forwarding them
	// (the paper's epoch); negative: forward every request at once.
	Epoch time.Duration `opt:"How long a Router collects requests before forwarding them; negative: forward every request at once." default:"1ms"`

	// TestingKnobs are hooks for tests, never options.
	TestingKnobs TestingKnobs
}

// TestingKnobs are hooks for tests. They are no options: kv/options sets
// only the int, float64 and time.Duration fields of Options itself, so
// --opt cannot reach them, and a store never records them.
type TestingKnobs struct {
	// Seed, when set, makes the tree, leaf and slot choices reproducible.
	Seed *[32]byte
	// Leak injects a flaw on purpose, to show that an audit catches it
	// (leak.go); zero is the protocol as specified. Outside this package
	// only tests name a leak (through export_test.go); the oblivkv_leaks
	// build chooses one from the environment (leak_env.go).
	Leak leak
	// Trace is told what the trusted layers do (from many goroutines).
	Trace func(traceEvent)
	// Transport, when set, is the network the layers' messages cross,
	// each message and reply sealed under the store key (wire.go),
	// instead of direct calls: the tests' one loses, copies, delays and
	// reorders them.
	Transport network
	// Wire makes every message between the layers, and every reply, cross
	// sealed under the store key as between processes (wire.go), over
	// direct calls when no Transport is set.
	Wire bool
	// PartTimeout, when set, is how long a tree holds the parts of an
	// epoch waiting for its last one, instead of defaultPartTimeout.
	PartTimeout time.Duration
	// Clock, when set, is the clock the Routers' epochs and the trees'
	// part timeouts run on, instead of the real one: a driver that
	// advances a clockwork.FakeClock itself gives the layers the same
	// epochs on a loaded machine as on an idle one (the obliviousness
	// audits: `oblivkv audit` and the tests).
	Clock clockwork.Clock
	// InFlight, above 1, is how many operations of a tree may be in
	// flight at once (oramMachine); 0 or 1: one at a time. Recovery of
	// several journaled plans and the audits' pairing of interleaved
	// Reads and Writes are not built yet, so it is for tests and
	// measurements only.
	InFlight int
}

// Defaults.
const (
	DefaultRouters     = 1
	DefaultStashShards = 2
	DefaultORAMShards  = 2
	DefaultTrees       = 8
	DefaultZ           = 4
	DefaultS           = 10
	DefaultA           = 20
	DefaultK           = 5
	// DefaultCachedLevels is the most levels a tree holds in memory by
	// default (Options.CachedLevels).
	DefaultCachedLevels = 10
	DefaultEpoch        = time.Millisecond
)

// defaultPartTimeout is how long a tree waits for the last Stash shard's
// part of an epoch before giving the epoch up (treeCore.abandon). Every
// shard sends every tree a part of every epoch at once, resending it while
// it is lost, so only a shard cut off that long misses it.
const defaultPartTimeout = 10 * time.Second

// PaperOptions returns the paper's parameters where the defaults differ:
// Z=1 (Sec. 5.3.1), S=6, A=100 and k=200 (Sec. 7, "Experimental Setup"),
// every bucket on storage.
func PaperOptions() Options {
	return Options{Z: ringoram.PaperZ, S: ringoram.PaperS, A: 100, K: 200, CachedLevels: -1}
}

// EnsureDefaults returns o with its zero fields at their defaults, which
// do not depend on the capacity (but for CachedLevels, which stays zero):
// the public parameters the store runs with, which an audit checks
// storage's view against.
func (o Options) EnsureDefaults(int) Options {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&o.Routers, DefaultRouters)
	set(&o.StashShards, DefaultStashShards)
	set(&o.Trees, DefaultTrees)
	set(&o.ORAMShards, min(DefaultORAMShards, o.Trees))
	set(&o.Z, DefaultZ)
	set(&o.S, DefaultS)
	set(&o.A, DefaultA)
	set(&o.K, DefaultK)
	if o.Epoch == 0 {
		o.Epoch = DefaultEpoch
	}
	return o
}

// Validate reports options a store cannot run with, at any capacity.
func (o Options) Validate(int) error {
	switch {
	case o.Routers < 1 || o.StashShards < 1 || o.Trees < 1:
		return fmt.Errorf("treebeard: Routers, StashShards and Trees must be at least 1 (got %d, %d, %d)", o.Routers, o.StashShards, o.Trees)
	case o.ORAMShards < 1 || o.ORAMShards > o.Trees:
		return fmt.Errorf("treebeard: ORAMShards must be between 1 and Trees (%d), got %d", o.Trees, o.ORAMShards)
	case o.Z < 1 || o.Z > 32:
		return fmt.Errorf("treebeard: Z must be between 1 and 32, got %d", o.Z)
	case o.S < o.Z || o.Z+o.S > 64:
		return fmt.Errorf("treebeard: S must be between Z (%d) and %d, got %d", o.Z, 64-o.Z, o.S)
	case o.A < 1 || o.K < 1:
		return fmt.Errorf("treebeard: A and K must be at least 1 (got %d, %d)", o.A, o.K)
	case o.CachedLevels > ringoram.MaxCachedLevels:
		return fmt.Errorf("treebeard: CachedLevels must be at most %d, got %d", ringoram.MaxCachedLevels, o.CachedLevels)
	}
	return nil
}

// cachedLevels returns how many top levels of a tree of height l its ORAM
// shard holds in memory with the option set to o (Options.CachedLevels).
func cachedLevels(o, l int) int {
	switch {
	case o < 0:
		return 0
	case o == 0:
		return max(0, min(DefaultCachedLevels, l-3))
	}
	return min(o, l)
}

// geometry returns the shape of each storage tree for capacity blocks over
// trees trees of buckets of z real slots. Blocks go to uniformly random
// trees, so a tree holds capacity/trees blocks on average; each tree gets
// the smallest power of two of leaves at least that divided by z, hence
// at least two real slots per block it holds on average (the 2^(L+1)-1
// buckets of a tree of 2^L leaves). That margin absorbs the random
// imbalance between trees (a standard deviation of sqrt(capacity/trees)
// blocks) and keeps evictions finding free slots, so the stash stays small.
func geometry(capacity, trees, z int) tree.Geometry {
	perTree := (capacity + trees - 1) / trees
	return tree.NewGeometry((perTree + z - 1) / z)
}
