package taostore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// state is a checkpoint: the proxy's whole trusted state but the requests
// in flight.
type state struct {
	Z, CachedLevels int // the layout the tree was written with
	Pos             map[tree.BlockID]uint64
	Names           map[tree.BlockID]string // none in an earlier build's checkpoint
	Stash           map[tree.BlockID][]byte
	Nodes           map[uint64][]tree.Block // the subtree: cached levels and buckets fresher than storage
	Version         uint64
	Acked           []uint64
	// Unfinished are the path reads planned and never processed (a store
	// closed while storage failed them), finished at the next open.
	Unfinished map[uint64]plannedPath
	NextPlan   uint64
}

// writeInitial writes every stored bucket of the tree, holding blocks[b]
// (blocks may be nil: an empty tree), under one new version, in writes of
// about tree.DefaultBatchBytes: the initial layout of a fresh or
// bulk-loaded store, never one access per block.
func (s *store) writeInitial(ctx context.Context, blocks [][]tree.Block) error {
	s.version++
	per := uint64(max(1, tree.DefaultBatchBytes/s.codec.BucketSize()))
	n := s.geo.Buckets()
	for start := s.geo.BucketAt(0, s.opts.CachedLevels); start < n; start += per {
		buckets := make([]uint64, 0, per)
		for b := start; b < min(start+per, n); b++ {
			buckets = append(buckets, b)
		}
		contents := make([][]tree.Block, len(buckets))
		if blocks != nil {
			copy(contents, blocks[start:])
		}
		items, err := s.seal(buckets, contents, s.version)
		if err == nil {
			_, err = s.b.WriteVersioned(ctx, items)
		}
		if err != nil {
			return fmt.Errorf("writing the initial tree: %w", err)
		}
		s.acknowledge(buckets, s.version)
	}
	return nil
}

// Load implements kv.Loader: every item gets a random leaf and the deepest
// bucket with room on its path (overflow goes to the stash), and the whole
// tree is written in large batches.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pos) > 0 {
		return len(s.pos), kv.ErrNotEmpty
	}
	values, names := map[tree.BlockID][]byte{}, map[tree.BlockID]string{}
	for k, v := range items {
		id := s.blockID(k)
		values[id], names[id] = append([]byte{}, v...), k
		if len(values) > s.capacity {
			return 0, errFull(s.capacity)
		}
	}
	s.names = names
	placed := make([][]tree.Block, s.geo.Buckets())
	for id, v := range values {
		s.pos[id] = s.randomLeaf()
		if !tree.PlaceDeepest(s.geo, placed, s.opts.Z, s.pos[id], tree.Block{ID: id, Value: v}) {
			s.stash[id] = v
		}
	}
	for b, n := range s.sub.nodes { // the cached levels stay in memory
		n.blocks, placed[b] = placed[b], nil
	}
	// Journaled first, with the version the tree is written under: a
	// crash while it is written leaves a tree that matches no state, and
	// recovery writes an empty one afresh under a newer version.
	if _, err := s.log.Commit(binary.AppendUvarint([]byte{deltaLoad}, s.version+1)); err != nil {
		return 0, fmt.Errorf("taostore: %w", err)
	}
	if err := s.writeInitial(ctx, placed); err != nil {
		return 0, err
	}
	s.mu.Unlock()
	defer s.mu.Lock()
	if err := s.checkpoint(ctx); err != nil {
		return 0, err
	}
	return len(s.pos), nil
}

// Close waits for the write-backs in flight, writes the whole subtree
// back, replaces the journal by a checkpoint, stops the committer and
// closes the backend.
func (s *store) Close() error {
	ctx := context.Background()
	err := s.writeBackAll(ctx)
	// A checkpoint in the background ends first, even when the write-back
	// failed: a closed store touches storage no more.
	s.checkpointing.Lock()
	defer s.checkpointing.Unlock()
	if err == nil {
		err = s.checkpointLocked(ctx)
	}
	s.stopCommitter()
	return errors.Join(err, s.b.Close())
}

// writeBackAll writes every stored bucket of the subtree back, as one
// journaled write-back, once the write-backs in flight are done, and drops
// those buckets from the subtree: storage then holds everything but the
// cached levels and the stash, and no flushed path awaits a write-back
// (recovery's finished reads flush paths too).
func (s *store) writeBackAll(ctx context.Context) error {
	s.mu.Lock()
	s.awaitWriteBacks(s.version)
	buckets := s.sub.stored()
	contents, _ := s.sub.snapshot(buckets)
	s.flushed = nil
	s.version++
	version := s.version
	s.mu.Unlock()
	if _, err := s.writeBack(ctx, buckets, contents, version); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acknowledge(buckets, version)
	for _, b := range buckets {
		delete(s.sub.nodes, b)
	}
	return nil
}

// checkpoint replaces the journal by the state, after the checkpoint in
// progress, if any.
func (s *store) checkpoint(ctx context.Context) error {
	s.checkpointing.Lock()
	defer s.checkpointing.Unlock()
	return s.checkpointLocked(ctx)
}

// checkpointLocked is checkpoint with s.checkpointing held.
func (s *store) checkpointLocked(ctx context.Context) error {
	st, at, err := s.encodeState()
	if err != nil {
		return err
	}
	return s.log.Checkpoint(ctx, st, at)
}

// encodeState returns the state as a checkpoint holds it (Snapshot), and
// the last journal record it includes, once the write-backs journaled up
// to that record have been issued.
func (s *store) encodeState() ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaitWriteBacks(s.version)
	at := s.log.Last()
	st, err := s.Snapshot()
	return st, at, err
}

// Snapshot implements durable.Machine: the state but the requests in
// flight. s.mu is held, so the maps are encoded as they are.
func (s *store) Snapshot() ([]byte, error) {
	st := state{Z: s.opts.Z, CachedLevels: s.opts.CachedLevels, Pos: s.pos, Names: s.names, Stash: s.stash,
		Nodes: map[uint64][]tree.Block{}, Version: s.version, Acked: s.acked, Unfinished: s.unfinished, NextPlan: s.nextPlan}
	for b, n := range s.sub.nodes {
		st.Nodes[b] = n.blocks
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(st); err != nil {
		return nil, fmt.Errorf("taostore: encoding a checkpoint: %w", err)
	}
	return buf.Bytes(), nil
}

// Restore implements durable.Machine: it installs a checkpoint.
func (s *store) Restore(b []byte) error {
	var st state
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&st); err != nil {
		return fmt.Errorf("%w: decoding the checkpoint: %v", kv.ErrTampered, err)
	}
	if st.Z != s.opts.Z || st.CachedLevels != s.opts.CachedLevels {
		return fmt.Errorf("%w: the store was written with Z=%d CachedLevels=%d, the options ask for Z=%d CachedLevels=%d",
			kv.ErrMismatch, st.Z, st.CachedLevels, s.opts.Z, s.opts.CachedLevels)
	}
	if len(st.Acked) != len(s.acked) {
		return fmt.Errorf("%w: the checkpoint is of a tree of %d buckets", kv.ErrMismatch, len(st.Acked))
	}
	s.pos, s.stash, s.version, s.acked = cmpNonNil(st.Pos, s.pos), cmpNonNil(st.Stash, s.stash), st.Version, st.Acked
	s.names = cmpNonNil(st.Names, map[tree.BlockID]string{})
	s.unfinished, s.nextPlan = cmpNonNil(st.Unfinished, s.unfinished), st.NextPlan
	for b, blocks := range st.Nodes {
		s.sub.set(b, blocks)
	}
	return nil
}

func cmpNonNil[M ~map[K]V, K comparable, V any](m, fallback M) M {
	if m == nil {
		return fallback
	}
	return m
}

// recover rebuilds the trusted state from the journal (durable.Log.Replay):
// the checkpoint, then each path processed since (its buckets as the
// flush left them, the answered block's position, the stash) and each
// write-back (its version), in order; then the whole subtree, every
// bucket changed since the checkpoint, is written back, which redoes any
// write-back storage lost, before a new checkpoint. A bulk load cut short
// leaves an empty tree, written afresh.
func (s *store) recover(ctx context.Context) error {
	if _, err := s.log.Replay(ctx, s); err != nil {
		return fmt.Errorf("taostore: %w", err)
	}
	if s.opts.TestingKnobs.Leak == leakRecoveryChecksPositions {
		if err := s.checkPositions(ctx); err != nil {
			return err
		}
	}
	if s.loadCut {
		s.loadCut = false
		s.pos, s.names, s.stash = map[tree.BlockID]uint64{}, map[tree.BlockID]string{}, map[tree.BlockID][]byte{}
		s.sub = newSubtree(s.geo, s.opts.CachedLevels)
		s.unfinished = map[uint64]plannedPath{}
		if err := s.writeInitial(ctx, nil); err != nil {
			return fmt.Errorf("taostore: rewriting the tree of an interrupted bulk load: %w", err)
		}
	}
	if s.opts.TestingKnobs.Leak == leakRecoveryForgetsReads {
		clear(s.unfinished)
	}
	if err := s.finishUnfinished(ctx); err != nil {
		return err
	}
	if err := s.writeBackAll(ctx); err != nil {
		return err
	}
	return s.checkpoint(ctx)
}

// finishUnfinished reads again, identically and in the order they were
// planned, the path reads a crash cut short (or storage failed until the
// store closed), and processes each as its request would have been: the
// path joins the subtree and, for a real read, the block leaves it for the
// stash and a fresh leaf. Storage learns that reads were cut short, not
// which were real: left alone, a block whose real read it served would
// stay on that path, and its next access would read the path again.
func (s *store) finishUnfinished(ctx context.Context) error {
	for _, plan := range slices.Sorted(maps.Keys(s.unfinished)) {
		p := s.unfinished[plan]
		r := &request{m: kv.Mutation{Op: kv.MutRead}, id: p.ID, leaf: p.Leaf, real: p.Real, plan: plan}
		s.mu.Lock()
		s.sub.request(r.leaf)
		if r.real {
			s.reqs[r.id] = append(s.reqs[r.id], r)
		}
		s.mu.Unlock()
		fetched, versions, err := s.readPath(ctx, r.leaf)
		s.mu.Lock()
		lsn := s.process(r, fetched, versions, err)
		s.mu.Unlock()
		if err := cmp.Or(r.err, s.log.Sync(lsn)); err != nil {
			return fmt.Errorf("taostore: finishing a path read cut short: %w", err)
		}
	}
	return nil
}

// JournalsEveryWrite implements kv.WriteJournaler: every write-back is
// journaled before it is issued, and recovery rebuilds and writes again
// every bucket changed since the checkpoint from the path records.
func (s *store) JournalsEveryWrite() bool { return s.log.Durable() }

// StoredKeys implements kv.KeyLister from the names kept beside the
// position map. A key an earlier build stored has no name: then it names
// none (kv.ErrKeysUnnamed).
func (s *store) StoredKeys(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tree.NamedKeys(s.pos, s.names)
}

func (s *store) Stats() kv.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counters
	return kv.Stats{Keys: int64(len(s.pos)), Extra: []kv.Stat{
		{Name: kv.StatTreeLevels, Value: float64(s.geo.L + 1)},
		{Name: kv.StatBucketZ, Value: float64(s.opts.Z)},
		{Name: kv.StatWriteBackThreshold, Value: float64(s.opts.K)},
		{Name: kv.StatStashSize, Value: float64(len(s.stash))},
		{Name: kv.StatStashMax, Value: float64(c.stashMax)},
		{Name: kv.StatSubtreeNodes, Value: float64(len(s.sub.nodes))},
		{Name: kv.StatSubtreeMax, Value: float64(s.sub.max)},
		{Name: kv.StatRealReads, Value: float64(c.realReads)},
		{Name: kv.StatFakeReads, Value: float64(c.fakeReads)},
		{Name: kv.StatWriteBacks, Value: float64(c.writeBacks)},
		{Name: kv.StatStaleBuckets, Value: float64(c.staleBuckets)},
		{Name: kv.StatWriteBackErrors, Value: float64(c.writeBackErrors)},
		{Name: kv.StatReadRetries, Value: float64(c.readRetries)},
	}}
}
