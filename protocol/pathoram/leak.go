package pathoram

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// leak is a flaw injected on purpose, to show that an audit catches it
// (audit_test.go). Tests set it as Options.TestingKnobs.Leak, and the
// oblivkv_leaks build from the environment (leak_env.go); the zero value,
// noLeak, is the protocol as specified. The type is unexported: outside
// the package, only tests name another, through export_test.go.
type leak uint8

const (
	noLeak leak = iota
	// leakGetKeepsLeaf: a Get leaves its block on the leaf it was read
	// from, so the next access to the key reads the same path.
	leakGetKeepsLeaf
	// leakMissingKeyedLeaf: a key not in the position map reads a leaf
	// derived from its block ID instead of a fresh random one, and an
	// access planned behind another of the same missing key moves it
	// there too, so every access to it reads that path however the
	// accesses overlap.
	leakMissingKeyedLeaf
	// leakUnchangedNotWritten: the write-back leaves out the buckets whose
	// blocks did not change, as if rewriting them were wasted work.
	leakUnchangedNotWritten
	// leakRecoveryChecksPositions: recovery reads the path of every block
	// the position map holds, to check the journal against storage, and
	// so shows storage the position map.
	leakRecoveryChecksPositions
	// leakRecoveryForgetsReads: recovery drops the access a crash cut short
	// after its path read, so the block stays on the path storage saw read,
	// and the next access to it reads that path again.
	leakRecoveryForgetsReads
	// leakRecoveryKeepsLastRead: recovery keeps only the last of the
	// accesses a crash cut short after their path reads (as a single
	// slot for the unfinished access would), so the block of an earlier
	// one stays on the path storage saw read.
	leakRecoveryKeepsLastRead
	// leakKeyedRemap: an access moves its block to a leaf derived from
	// the block's ID instead of a fresh random one, so every access to
	// the key after the first reads one path.
	leakKeyedRemap
	// leakChainedRemap: an access moves its block to a leaf derived from
	// the leaf it was read from (one step of a linear congruential
	// generator, as if the old leaf seeded it), so the leaves of one
	// key's accesses follow a fixed chain through every leaf.
	leakChainedRemap
	// leakInflightNotRead: a path read leaves out the buckets the
	// write-back in flight rewrites, as if reading them were wasted work
	// (their blocks come from that write-back), so storage sees which
	// buckets two consecutive paths share.
	leakInflightNotRead
	// leakFixedSeed: a store opened without a test seed begins its random
	// choices at a constant seed instead of random.Fresh's, so every
	// store makes the same choices and storage can predict them.
	leakFixedSeed
)

// checkPositions is leakRecoveryChecksPositions' read of the path of
// every block.
func (s *store) checkPositions(ctx context.Context) error {
	for _, leaf := range s.o.pos {
		if _, err := s.remote.readPath(ctx, s.o.g.Path(leaf, nil)); err != nil {
			return err
		}
	}
	return nil
}

// notRewritten is leakInflightNotRead: the buckets of path the
// write-back in flight does not rewrite.
func (r *remote) notRewritten(path []uint64) []uint64 {
	return slices.DeleteFunc(slices.Clone(path), func(b uint64) bool {
		_, rewritten := r.inflightContents(b)
		return rewritten
	})
}

// withRewrittenLeft places the buckets leakInflightNotRead read, stored,
// at their places in path; the others, left out, are nil.
func withRewrittenLeft(path, read []uint64, stored [][]tree.Block) [][]tree.Block {
	out := make([][]tree.Block, len(path))
	for i, j := 0, 0; i < len(path) && j < len(read); i++ {
		if path[i] == read[j] {
			out[i], j = stored[j], j+1
		}
	}
	return out
}

// mapped reports whether the position map holds block id.
func (o *oram) mapped(id tree.BlockID) bool {
	_, ok := o.pos[id]
	return ok
}

// keyedLeaf is leakMissingKeyedLeaf's leaf for a block.
func (o *oram) keyedLeaf(id tree.BlockID) uint64 {
	return binary.BigEndian.Uint64(id[:8]) & (o.g.Leaves() - 1)
}

// leakedRemap is the leaf leakKeyedRemap or leakChainedRemap moves block
// id to after an access that read prev's path.
func (o *oram) leakedRemap(id tree.BlockID, prev uint64) uint64 {
	if o.leak == leakKeyedRemap {
		return o.keyedLeaf(id)
	}
	return chainedLeaf(prev, o.g.Leaves())
}

// chainedLeaf is leakChainedRemap's leaf after prev, of leaves (a power of
// two): a full-period linear congruential step, so the chain visits every
// leaf and never stays.
func chainedLeaf(prev, leaves uint64) uint64 {
	return (prev*6364136223846793005 + 1442695040888963407) & (leaves - 1)
}

// changedOnly is leakUnchangedNotWritten: of path and contents, the
// buckets whose blocks differ from what the last read found.
func (r *remote) changedOnly(path []uint64, contents [][]tree.Block) ([]uint64, [][]tree.Block) {
	var p []uint64
	var c [][]tree.Block
	for i, b := range path {
		if !slices.EqualFunc(contents[i], r.lastRead[i], func(x, y tree.Block) bool {
			return x.ID == y.ID && bytes.Equal(x.Value, y.Value)
		}) {
			p, c = append(p, b), append(c, contents[i])
		}
	}
	return p, c
}

// envLeak returns l: the protocol as given. Only in builds with the
// oblivkv_leaks tag, leak_env.go replaces it with the leak the
// environment chooses (internal/testsupport/leakenv), so a test can show `oblivkv
// audit` catching it.
var envLeak = func(l leak) (leak, error) { return l, nil }
