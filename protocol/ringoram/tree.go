package ringoram

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
	"github.com/oblivkv/oblivkv/seal"
)

// The Treebeard paper's bucket parameters (Sec. 5.3.1 sets Z=1; Sec. 7
// uses S=6).
const (
	PaperZ = 1
	PaperS = 6
)

// MaxLevels bounds a tree's height: the Tree keeps 8 bytes of trusted
// state per bucket in memory.
const MaxLevels = 32

// MaxCachedLevels bounds Config.CachedLevels: 2^16-1 buckets of Z blocks in
// memory per tree.
const MaxCachedLevels = 16

// Params are Ring ORAM's bucket parameters: at most Z real blocks and at
// least S dummy slots per bucket, Z+S slots in all (at most 64), S >= Z.
// A bucket is reshuffled once fewer than Z of its dummies are unread: a
// multi-path read takes up to Z slots of a bucket (after S reads with
// Z = 1, as in Ring ORAM).
type Params struct{ Z, S int }

func (p Params) slots() int { return p.Z + p.S }

func (p Params) validate() error {
	if p.Z < 1 || p.S < p.Z || p.Z+p.S > 64 {
		return fmt.Errorf("ringoram: Z=%d, S=%d: want Z >= 1, S >= Z (a read may take Z dummies from a bucket) and Z+S <= 64", p.Z, p.S)
	}
	return nil
}

// Config configures a Tree and the Driver that runs it on storage.
// Backend, Keys, ReadAhead and WriteAhead are the Driver's: a Tree does
// no I/O.
type Config struct {
	Backend   backend.Backend
	Keys      *seal.Keys
	Geometry  tree.Geometry
	Params    Params
	Layout    Layout
	ValueSize int // the largest value a block may hold
	// CachedLevels is how many levels of the tree, from the root, are held
	// in trusted memory instead of on storage (topCache), at most
	// MaxCachedLevels; a tree of height L holds at most L, so its leaves'
	// level stays on storage.
	CachedLevels int
	Seed         *random.Seed // where slot choices and permutations begin; nil: random.Fresh
	// ReadAhead, if set, sees every multi-path read's and eviction's Plan
	// before it reads a slot.
	ReadAhead ReadAhead
	// WriteAhead, if set, sees every multi-path read's and eviction's
	// Change before its Write is issued (not Init's writes, nor a Redo's).
	WriteAhead WriteAhead
}

// Tree is one Ring ORAM storage tree's trusted state and the steps of its
// operations (step.go): it never calls a backend, reads a clock or starts
// a goroutine. Its caller (a Driver, or a protocol's machine) issues the
// I/O each step names and hands the results to the next step. It is not
// safe for concurrent use.
type Tree struct {
	g         tree.Geometry
	p         Params
	l         Layout
	valueSize int
	seeds     *rand.ChaCha8 // draws each operation's Plan.Seed

	versions  []uint64                  // per bucket: the metadata version storage must hold
	cache     metaCache                 // the buckets' metadata as last written or read
	top       topCache                  // the top levels' buckets, in trusted memory
	evictions uint64                    // paths evicted so far; the next is ReverseLexLeaf(evictions)
	stale     map[uint64][]tree.BlockID // per bucket: copies the caller superseded (Forget)
	stats     Stats
	leak      leak // tests only (leak.go)

	resume  []Plan        // the plans of operations a crash cut short, in order (Resume)
	besides uint64        // operations started beside others since the Tree was made or restored (StartedBeside)
	ops     []*operation  // the operations in progress, oldest first
	opSrc   *rand.ChaCha8 // the newest operation's source (Init's before any)
	rng     *rand.Rand    // the source the step running draws from
}

// Stats counts a Tree's work since it was made.
type Stats struct {
	PathReads      uint64 // requests served by ReadPaths
	MultiReads     uint64 // ReadPaths calls that read storage
	BucketsRead    uint64 // buckets read by ReadPaths (each bucket of a union once)
	Reshuffles     uint64 // buckets rewritten by an early reshuffle
	Evictions      uint64 // Evict calls
	EvictedPaths   uint64 // paths evicted
	BucketsWritten uint64 // buckets whose slots were all rewritten (Init, reshuffles, evictions)
	ReadRetries    uint64 // slot Reads issued again, unchanged, after storage failed them
	MetaReads      uint64 // metadata records read from storage (metaCache had no copy)
	CachedHits     uint64 // wanted blocks a top bucket held (no storage slot read for them)
	CachedBlocks   uint64 // blocks the top levels hold now
}

// Add adds o's counters to s (the trees of a store).
func (s *Stats) Add(o Stats) {
	s.PathReads += o.PathReads
	s.MultiReads += o.MultiReads
	s.BucketsRead += o.BucketsRead
	s.Reshuffles += o.Reshuffles
	s.Evictions += o.Evictions
	s.EvictedPaths += o.EvictedPaths
	s.BucketsWritten += o.BucketsWritten
	s.ReadRetries += o.ReadRetries
	s.MetaReads += o.MetaReads
	s.CachedHits += o.CachedHits
	s.CachedBlocks += o.CachedBlocks
}

// NewTree returns a Tree of cfg's geometry and parameters. It validates
// them and does no I/O: a new tree must be written (Driver.Init), an
// existing one needs its state back (Restore).
func NewTree(cfg Config) (*Tree, error) {
	if err := cfg.Params.validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Geometry.L < 0 || cfg.Geometry.L > MaxLevels:
		return nil, fmt.Errorf("ringoram: tree height %d outside 0..%d", cfg.Geometry.L, MaxLevels)
	case cfg.ValueSize < 0:
		return nil, fmt.Errorf("ringoram: value size %d", cfg.ValueSize)
	case cfg.CachedLevels < 0 || cfg.CachedLevels > MaxCachedLevels:
		return nil, fmt.Errorf("ringoram: %d top levels in memory outside 0..%d", cfg.CachedLevels, MaxCachedLevels)
	}
	if cfg.Seed == nil {
		seed, err := random.Fresh()
		if err != nil {
			return nil, fmt.Errorf("ringoram: %w", err)
		}
		cfg.Seed = &seed
	}
	seeds := random.New(*cfg.Seed)
	opSrc := random.New(random.Draw(seeds)) // Init's choices, until an operation draws its own
	return &Tree{
		g: cfg.Geometry, p: cfg.Params, l: cfg.Layout, valueSize: cfg.ValueSize,
		seeds: seeds, opSrc: opSrc, rng: rand.New(opSrc),
		versions: make([]uint64, cfg.Geometry.Buckets()),
		cache:    newMetaCache(cfg.Geometry.Buckets(), cfg.Params.Z),
		top:      newTopCache(cfg.CachedLevels, cfg.Geometry.L),
		stale:    map[uint64][]tree.BlockID{},
	}, nil
}

// Stats returns the counters so far, and the blocks the top levels hold.
func (t *Tree) Stats() Stats {
	s := t.stats
	for _, blocks := range t.top.blocks {
		s.CachedBlocks += uint64(len(blocks))
	}
	return s
}

// StartedBeside returns how many operations started beside others in
// progress (Beside) since the Tree was made or restored: a count for
// tests and measurements, not part of its state.
func (t *Tree) StartedBeside() uint64 { return t.besides }

// EvictionLeaves returns the leaves the next Evict(k) will evict, without
// evicting: the next k paths in reverse-lexicographic order (Sec. 5.3.2).
func (t *Tree) EvictionLeaves(k int) []uint64 {
	leaves := make([]uint64, max(k, 0))
	for i := range leaves {
		leaves[i] = t.g.ReverseLexLeaf(t.evictions + uint64(i))
	}
	return leaves
}

// Forget marks the copy of block id in bucket as stale: the caller
// superseded it. Reads no longer return it, and the next rewrite of the
// bucket (eviction or early reshuffle) frees its slot. A bucket outside
// the tree holds no copy; forgetting it does nothing.
func (t *Tree) Forget(bucket uint64, id tree.BlockID) {
	if bucket >= t.g.Buckets() || t.isStale(bucket, id) {
		return
	}
	if t.top.holds(bucket) {
		t.forgetTop(bucket, id)
		return
	}
	t.stale[bucket] = append(t.stale[bucket], id)
}

func (t *Tree) isStale(bucket uint64, id tree.BlockID) bool {
	return slices.Contains(t.stale[bucket], id)
}

// live reports whether e is a real block of bucket a read may return.
func (t *Tree) live(bucket uint64, e entry) bool {
	return e.Present && !t.isStale(bucket, e.ID)
}

// TreeState is the trusted state of a Tree, everything a clean restart
// needs besides the storage: gob-encodable.
type TreeState struct {
	L            int      // the geometry's height
	Z, S         int      // the parameters
	CachedLevels int      // levels held in trusted memory
	Versions     []uint64 // per bucket: the expected metadata version
	Evictions    uint64   // paths evicted so far
	Stale        []StaleEntry
	Top          []TopBucket // the top buckets that hold blocks
	// Seeds is the source of the next operations' Plan seeds (a ChaCha8's
	// state; none in states of earlier builds, whose Restore keeps the
	// Tree's own). A seed storage saw used is never drawn again after a
	// Restore: an operation reads only once its Plan is recorded, and
	// replaying the recorded Plans advances the source past them
	// (Planned).
	Seeds []byte
}

// StaleEntry is a copy of a block the caller superseded (Forget).
type StaleEntry struct {
	Bucket uint64
	ID     tree.BlockID
}

// State returns a copy of the trusted state.
func (t *Tree) State() TreeState {
	seeds, err := t.seeds.MarshalBinary()
	if err != nil {
		panic("ringoram: encoding a ChaCha8: " + err.Error()) // it cannot fail
	}
	s := TreeState{L: t.g.L, Z: t.p.Z, S: t.p.S, CachedLevels: t.top.levels, Versions: slices.Clone(t.versions),
		Evictions: t.evictions, Top: t.topState(), Seeds: seeds}
	for b, ids := range t.stale {
		for _, id := range ids {
			s.Stale = append(s.Stale, StaleEntry{Bucket: b, ID: id})
		}
	}
	slices.SortFunc(s.Stale, func(a, b StaleEntry) int {
		return cmp.Or(cmp.Compare(a.Bucket, b.Bucket), slices.Compare(a.ID[:], b.ID[:]))
	})
	return s
}

// Restore replaces the trusted state with s, which must come from a Tree
// of the same geometry and parameters.
func (t *Tree) Restore(s TreeState) error {
	if s.L != t.g.L || s.Z != t.p.Z || s.S != t.p.S || s.CachedLevels != t.top.levels || uint64(len(s.Versions)) != t.g.Buckets() {
		return fmt.Errorf("ringoram: state of a tree with L=%d, Z=%d, S=%d, %d levels in memory and %d buckets does not fit L=%d, Z=%d, S=%d, %d levels in memory",
			s.L, s.Z, s.S, s.CachedLevels, len(s.Versions), t.g.L, t.p.Z, t.p.S, t.top.levels)
	}
	stale := map[uint64][]tree.BlockID{}
	for _, e := range s.Stale {
		if e.Bucket >= t.g.Buckets() {
			return fmt.Errorf("ringoram: stale entry in bucket %d of a tree of %d buckets", e.Bucket, t.g.Buckets())
		}
		stale[e.Bucket] = append(stale[e.Bucket], e.ID)
	}
	seeds := *t.seeds
	if len(s.Seeds) > 0 {
		if err := seeds.UnmarshalBinary(s.Seeds); err != nil {
			return fmt.Errorf("ringoram: the state's seed source: %w", err)
		}
	}
	top := newTopCache(t.top.levels, t.g.L)
	top, t.top = t.top, top
	if err := t.applyTop(s.Top); err != nil {
		t.top = top
		return err
	}
	*t.seeds = seeds
	copy(t.versions, s.Versions)
	t.cache.clear()
	t.evictions, t.stale = s.Evictions, stale
	return nil
}
