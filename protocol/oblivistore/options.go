package oblivistore

import (
	"fmt"
	"math"
)

// Options are ObliviStore's parameters. A zero field takes the default its
// `default` tag states, most scaled to the store's capacity N.
type Options struct {
	// Partitions is the number of partitions, as in the partitioning
	// framework of Sec. III-A.
	Partitions int `opt:"Partitions the blocks are spread over, each a hierarchy of levels shuffled on its own." default:"ceil(sqrt(N))"`
	// Groups is the number of partition groups, each with its own
	// shuffler and semaphores: the ORAM nodes of Sec. VI, here in one
	// process.
	Groups int `opt:"Partition groups (ORAM nodes), each with its own shuffler and semaphores; at most Partitions." default:"1"`
	// EvictionRate is nu, the evictions scheduled per access (Sec.
	// III-A); a fractional rate schedules floor(nu) evictions and one more
	// with probability nu - floor(nu).
	EvictionRate float64 `opt:"nu, evictions scheduled per access, from 1 to 16; a fraction schedules one more with that probability." default:"2"`
	// EarlyCacheIns bounds the early cache-ins held in the storage cache
	// (the early cache-in semaphore of Sec. V-D).
	EarlyCacheIns int `opt:"Early cache-ins the storage cache may hold (the early cache-in semaphore)." default:"max(4*ceil(sqrt(N)), 4*levels)"`
	// ShufflingBuffer bounds the blocks the shuffling buffer may hold (the
	// shuffling buffer semaphore), at least the largest shuffle's write.
	ShufflingBuffer int `opt:"Blocks the shuffling buffer may hold (the shuffling buffer semaphore)." default:"4 times the largest shuffle's write"`
	// EvictionsAhead bounds how many scheduled evictions accesses may run
	// ahead of the shuffler (the eviction semaphore).
	EvictionsAhead int `opt:"Scheduled evictions accesses may run ahead of the shuffler (the eviction semaphore)." default:"2*Partitions"`
	// ShuffleIOPerAccess is the shuffling I/O (blocks read or written)
	// each access allows the shuffler (the shuffling I/O semaphore); the
	// default tag's is twice the shuffler's amortized need.
	ShuffleIOPerAccess int `opt:"Blocks of shuffling I/O each access allows the shuffler (the shuffling I/O semaphore)." default:"ceil(8*EvictionRate*levels)"`
	// ShuffleIOAhead caps the shuffling I/O semaphore: how far the
	// shuffler may run ahead of accesses, at least the largest shuffle's
	// write.
	ShuffleIOAhead int `opt:"How far the shuffler may run ahead of accesses (the shuffling I/O semaphore's cap)." default:"2 times the largest shuffle's write"`

	// TestingKnobs are hooks for tests, never options.
	TestingKnobs TestingKnobs
	// valueSize is the store's value size, the largest value a mutation
	// may leave (set by the store, not an option; 0, for a core driven by
	// hand: no limit).
	valueSize int
}

// TestingKnobs are hooks for tests. They are no options: kv/options sets
// only the int, float64 and time.Duration fields of Options itself, so
// --opt cannot reach them, and a store never records them.
type TestingKnobs struct {
	// Seed, when set, makes every random choice reproducible.
	Seed *[32]byte
	// Leak injects a flaw on purpose, to show that an audit catches it
	// (leak.go); zero is the protocol as specified. Outside this package
	// only tests name a leak (through export_test.go); the oblivkv_leaks
	// build chooses one from the environment (leak_env.go).
	Leak leak
	// Trace tells a test what the trusted side knows of a run (trace.go).
	Trace trace
	// Wire makes every message between the Front and the partition
	// groups cross sealed under the store key, as between processes
	// (wire.go).
	Wire bool
	// SerialIO makes the driver issue backend calls one at a time in the
	// order the core emits them, and feed their completions back in that
	// order: storage then sees exactly the core's order.
	SerialIO bool
}

// Defaults that do not scale with N.
const (
	DefaultEvictionRate = 2
	evictionsPerPart    = 2
	earlyPerSqrtN       = 4
	bufferShuffles      = 4
	ioAheadShuffles     = 2
)

// geometry is the shape every partition shares.
type geometry struct {
	Partitions int
	// Groups is the number of partition groups; group g holds the
	// partitions p with p mod Groups = g.
	Groups int
	// Top is the top level L: levels 0..L, level l holding 2*2^l slots.
	// 2^L is at least the expected load N/P plus eight standard
	// deviations and 16, so a partition's real blocks fit its top level
	// (see topLevel).
	Top int
}

// slots is the number of slots of level l.
func slots(l int) int { return 2 << l }

// topLevel is the smallest L with 2^L >= n/p + 8*sqrt(n/p) + 16.
//
// The paper's partitions have 1/2 log N + 1 levels and the top level holds
// 2^L real blocks; it does not say what happens to a partition that
// receives more. Here every real block of a partition must fit its top
// level when all levels are merged into it (shuffle.go), so the top level
// is sized for the load's tail: a partition's load is binomial with mean
// n/p, and exceeding eight standard deviations has probability below
// 1e-15.
func topLevel(n, p int) int {
	mean := float64(n) / float64(p)
	need := mean + 8*math.Sqrt(mean) + 16
	return int(math.Ceil(math.Log2(need)))
}

// EnsureDefaults returns o with its zero fields at their defaults for a
// store of capacity n.
func (o Options) EnsureDefaults(n int) Options {
	if o.Partitions == 0 {
		o.Partitions = int(math.Ceil(math.Sqrt(float64(n))))
	}
	if o.Groups == 0 {
		o.Groups = 1
	}
	if o.EvictionRate == 0 {
		o.EvictionRate = DefaultEvictionRate
	}
	levels := topLevel(n, max(o.Partitions, 1)) + 1
	if o.EarlyCacheIns == 0 {
		o.EarlyCacheIns = max(earlyPerSqrtN*int(math.Ceil(math.Sqrt(float64(n)))), 4*levels)
	}
	if o.ShufflingBuffer == 0 {
		o.ShufflingBuffer = bufferShuffles * maxShuffleWrite(levels-1)
	}
	if o.EvictionsAhead == 0 {
		o.EvictionsAhead = evictionsPerPart * o.Partitions
	}
	if o.ShuffleIOPerAccess == 0 {
		o.ShuffleIOPerAccess = int(math.Ceil(8 * o.EvictionRate * float64(levels)))
	}
	if o.ShuffleIOAhead == 0 {
		o.ShuffleIOAhead = ioAheadShuffles * maxShuffleWrite(levels-1)
	}
	return o
}

// maxShuffleWrite bounds the slots one shuffle writes: every level.
func maxShuffleWrite(top int) int { return slots(top+1) - 2 }

// Validate reports options a store of capacity n cannot run with.
func (o Options) Validate(n int) error {
	levels := topLevel(n, max(o.Partitions, 1)) + 1
	switch {
	case o.Partitions < 1 || o.Partitions > n:
		return fmt.Errorf("oblivistore: Partitions must be between 1 and the capacity %d, got %d", n, o.Partitions)
	case o.Groups < 1 || o.Groups > o.Partitions:
		return fmt.Errorf("oblivistore: Groups must be between 1 and Partitions (%d), got %d", o.Partitions, o.Groups)
	case o.EvictionRate < 1 || o.EvictionRate > 16 || math.IsNaN(o.EvictionRate):
		return fmt.Errorf("oblivistore: EvictionRate (nu) must be between 1 and 16, got %v", o.EvictionRate)
	case o.EarlyCacheIns < levels:
		return fmt.Errorf("oblivistore: EarlyCacheIns must be at least the number of levels (%d), got %d", levels, o.EarlyCacheIns)
	case o.ShufflingBuffer < maxShuffleWrite(levels-1):
		return fmt.Errorf("oblivistore: ShufflingBuffer must hold the largest shuffle (%d blocks), got %d", maxShuffleWrite(levels-1), o.ShufflingBuffer)
	case o.EvictionsAhead < int(math.Ceil(o.EvictionRate)):
		return fmt.Errorf("oblivistore: EvictionsAhead must be at least nu rounded up (%d), got %d", int(math.Ceil(o.EvictionRate)), o.EvictionsAhead)
	case o.ShuffleIOPerAccess < 1:
		return fmt.Errorf("oblivistore: ShuffleIOPerAccess must be at least 1, got %d", o.ShuffleIOPerAccess)
	case o.ShuffleIOAhead < maxShuffleWrite(levels-1):
		return fmt.Errorf("oblivistore: ShuffleIOAhead must allow the largest shuffle (%d blocks), got %d", maxShuffleWrite(levels-1), o.ShuffleIOAhead)
	}
	return nil
}

func (o Options) geometry(n int) geometry {
	return geometry{Partitions: o.Partitions, Groups: max(o.Groups, 1), Top: topLevel(n, o.Partitions)}
}
