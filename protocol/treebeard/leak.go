package treebeard

import (
	"context"
	"encoding/binary"

	"github.com/oblivkv/oblivkv/protocol/ringoram"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// leak is a flaw injected on purpose, to show that an audit catches it
// (audit_test.go). Tests set it as Options.TestingKnobs.Leak, and the
// oblivkv_leaks build from the environment (leak_env.go); the zero value
// is the protocol as specified. The type is unexported: outside the
// package, only tests name another, through export_test.go.
type leak uint8

const (
	_ leak = iota // the protocol as specified
	// leakRepeatReadsRealPath: a request for a block whose real read is
	// in flight reads the block's real path again instead of a random
	// path of a random tree (Sec. 5.2.1's fake read), so the union of a
	// multi-path read shrinks under a hot key.
	leakRepeatReadsRealPath
	// leakMissingKeyedPosition: a request for a block that does not exist
	// reads a tree and leaf derived from its ID instead of fresh random
	// ones.
	leakMissingKeyedPosition
	// leakEvictOnRealReads: a tree counts only its real path reads towards
	// the eviction every A reads, as if fake reads did not wear buckets.
	leakEvictOnRealReads
	// leakEagerShardParts: a tree reads each Stash shard's part of an
	// epoch as it arrives instead of the whole epoch at once (Sec.
	// 5.3.1), so its multi-path reads follow how the epoch's keys hash.
	leakEagerShardParts
	// leakRecoveryForgetsEvictions: recovery replays the trees' reads and
	// evictions without advancing their eviction counters, so the
	// reverse-lexicographic eviction order starts again after a crash.
	leakRecoveryForgetsEvictions
	// leakRecoveryChecksPositions: recovery reads the metadata of the
	// path of every block the position map holds, to check the journal
	// against storage, and so shows storage the position map.
	leakRecoveryChecksPositions
	// leakRecoveryForgetsPlans: recovery ignores the plan of an operation
	// a crash cut short after it read, so the blocks it wanted are read
	// again with freshly chosen dummies beside their own slots.
	leakRecoveryForgetsPlans
	// leakKeyedRemap: an access moves its block to a tree and leaf derived
	// from the block's ID instead of fresh random ones, so a block is
	// found at one position access after access.
	leakKeyedRemap
	// leakRemapKeepsTree: an access moves its block to a fresh random leaf
	// of the tree it was in, instead of a random tree too (the random
	// tree invariant, Sec. 3), so a block never leaves its tree.
	leakRemapKeepsTree
	// leakDummiesInOrder: the trees' path reads take the lowest unread
	// dummy of each bucket instead of a random one (ringoram's
	// leakDummiesInOrder). Package ringoram offers no way to inject it
	// but in builds with the oblivkv_leaks tag, so only OBLIVKV_LEAK can
	// choose it (leak_env.go); ringoram's own tests show its audit.
	leakDummiesInOrder
	// leakTakeoverForgetsEvictions: a tree's new leader in a cluster
	// starts its evictions again from the first path, as if the count of
	// evictions were not part of the replicated state, so storage sees the
	// reverse-lexicographic order start over at a failover.
	leakTakeoverForgetsEvictions
	// leakFixedSeed: a store opened without a test seed begins its random
	// choices at a constant seed instead of random.Fresh's, so every
	// store makes the same choices and storage can predict them.
	leakFixedSeed
)

// checkPositions is leakRecoveryChecksPositions' read of the path of
// every block.
func (s *store) checkPositions(ctx context.Context) error {
	for _, sh := range s.stashes {
		for _, p := range sh.core.pos {
			var addrs []string
			for _, b := range s.geo.Path(p.Leaf, nil) {
				addrs = append(addrs, ringoram.Layout{Prefix: TreePrefix(p.Tree)}.MetaAddr(b))
			}
			if _, err := s.b.Read(ctx, addrs); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyedPosition is the position of a block leakMissingKeyedPosition and
// leakKeyedRemap derive from its ID.
func (c *stashCore) keyedPosition(id tree.BlockID) Position {
	v := binary.BigEndian.Uint64(id[8:])
	return Position{Tree: int(v % uint64(c.trees)), Leaf: (v / uint64(c.trees)) % c.geo.Leaves()}
}

// injectTreeLeak injects into a tree the leak of package ringoram that l
// stands for: none. Only in builds with the oblivkv_leaks tag,
// leak_env.go replaces it (leakDummiesInOrder).
var injectTreeLeak = func(l leak, t *ringoram.Tree) {}

// envLeak returns l: the protocol as given. Only in builds with the
// oblivkv_leaks tag, leak_env.go replaces it with the leak the
// environment chooses (internal/testsupport/leakenv), so a test can show `oblivkv
// audit` catching it.
var envLeak = func(l leak) (leak, error) { return l, nil }

// forgetEvictions is leakTakeoverForgetsEvictions: the tree's count of
// paths evicted, which gives the next eviction's paths, starts again,
// and nothing else of the tree's state changes. Only builds with the
// oblivkv_leaks tag, the only ones that can choose the leak, give it a
// body (leak_env.go).
var forgetEvictions = func(g *term, tr *ringoram.Tree) {}
