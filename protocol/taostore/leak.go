package taostore

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
	// leakRepeatReadsRealPath: a request for a block whose real read is
	// still in flight reads the block's real path again instead of a
	// random one, as if the request map were only used to answer.
	leakRepeatReadsRealPath
	// leakGetKeepsLeaf: a Get leaves its block on the leaf it was read
	// from ("a read changes nothing"), so the next access to the key
	// reads the same path.
	leakGetKeepsLeaf
	// leakMissingKeyedLeaf: a key not in the position map reads a leaf
	// derived from its block ID instead of a fresh random one.
	leakMissingKeyedLeaf
	// leakPutWritesBack: a Put's path is written back as soon as it is
	// flushed, to make the new value durable at once, instead of waiting
	// for K flushed paths.
	leakPutWritesBack
	// leakUnchangedNotWritten: a write-back leaves out the buckets whose
	// blocks are what storage already holds, as if rewriting them were
	// wasted work.
	leakUnchangedNotWritten
	// leakUnorderedReplies: the Sequencer lets a reply out as soon as it
	// is complete, not after every earlier request's.
	leakUnorderedReplies
	// leakRecoveryChecksPositions: recovery reads the path of every block
	// the position map holds, to check the journal against storage, and
	// so shows storage the position map.
	leakRecoveryChecksPositions
	// leakRecoveryForgetsReads: recovery drops the path reads a crash cut
	// short, so a block whose real read storage served stays on that path,
	// and its next access reads it again.
	leakRecoveryForgetsReads
	// leakKeyedRemap: a block answered moves to a leaf derived from its
	// ID instead of a fresh random one, so every real read of the key
	// after the first reads one path.
	leakKeyedRemap
	// leakChainedRemap: a block answered moves to a leaf derived from the
	// leaf of its real read (one step of a linear congruential generator,
	// as if the old leaf seeded it), so the leaves of one key's real reads
	// follow a fixed chain through every leaf.
	leakChainedRemap
	// leakFixedSeed: a store opened without a test seed begins its random
	// choices at a constant seed instead of random.Fresh's, so every
	// store makes the same choices and storage can predict them.
	leakFixedSeed
)

// checkPositions is leakRecoveryChecksPositions' read of the path of
// every block.
func (s *store) checkPositions(ctx context.Context) error {
	for _, leaf := range s.pos {
		if _, _, err := s.readPath(ctx, leaf); err != nil {
			return err
		}
	}
	return nil
}

// keyedLeaf is leakMissingKeyedLeaf's leaf for a block.
func (s *store) keyedLeaf(id tree.BlockID) uint64 {
	return binary.BigEndian.Uint64(id[:8]) & (s.geo.Leaves() - 1)
}

// leakedRemap is the leaf leakKeyedRemap or leakChainedRemap moves block
// id to after its real read of prev's path.
func (s *store) leakedRemap(id tree.BlockID, prev uint64) uint64 {
	if s.opts.TestingKnobs.Leak == leakKeyedRemap {
		return s.keyedLeaf(id)
	}
	return chainedLeaf(prev, s.geo.Leaves())
}

// chainedLeaf is leakChainedRemap's leaf after prev, of leaves (a power of
// two): a full-period linear congruential step, so the chain visits every
// leaf and never stays.
func chainedLeaf(prev, leaves uint64) uint64 {
	return (prev*6364136223846793005 + 1442695040888963407) & (leaves - 1)
}

// rememberFetched is leakUnchangedNotWritten's record of what storage
// holds: the buckets of leaf's path read from storage that the subtree
// is about to take in.
func (s *store) rememberFetched(leaf uint64, fetched [][]tree.Block) {
	if s.onStorage == nil {
		s.onStorage = map[uint64][]tree.Block{}
	}
	for i, blocks := range fetched {
		b := s.geo.BucketAt(leaf, s.opts.CachedLevels+i)
		if _, held := s.sub.nodes[b]; !held {
			s.onStorage[b] = slices.Clone(blocks)
		}
	}
}

// changedOnly is leakUnchangedNotWritten: of buckets and contents, those
// whose blocks differ from what storage holds; these will be what it
// holds.
func (s *store) changedOnly(buckets []uint64, contents [][]tree.Block) ([]uint64, [][]tree.Block) {
	var bs []uint64
	var cs [][]tree.Block
	for i, b := range buckets {
		old, known := s.onStorage[b]
		if known && slices.EqualFunc(contents[i], old, func(x, y tree.Block) bool {
			return x.ID == y.ID && bytes.Equal(x.Value, y.Value)
		}) {
			continue
		}
		bs, cs = append(bs, b), append(cs, contents[i])
		s.onStorage[b] = contents[i]
	}
	return bs, cs
}

// releaseComplete is leakUnorderedReplies: it lets out every complete
// request, wherever it is in the queue.
func (q *sequencer) releaseComplete() {
	q.queue = slices.DeleteFunc(q.queue, func(r *request) bool {
		if !r.complete(q.durable) {
			return false
		}
		if q.released != nil {
			q.released(r.arrival)
		}
		close(r.done)
		return true
	})
}

// envLeak returns l: the protocol as given. Only in builds with the
// oblivkv_leaks tag, leak_env.go replaces it with the leak the
// environment chooses (internal/testsupport/leakenv), so a test can show `oblivkv
// audit` catching it.
var envLeak = func(l leak) (leak, error) { return l, nil }
