// Package pathoram implements sequential Path ORAM, registered with kv as
// "pathoram": the classic reference point for every tree ORAM, exactly as
// reviewed in the TaoStore paper. What follows is TaoStore Sec. IV-A.
//
// Storage is a complete binary tree with at least Capacity leaves
// (tree.NewGeometry) of buckets of Z slots (default 4). Every access, of
// any kind, reads the whole path of one leaf in one backend Read, answers
// from the path and the stash, remaps the block to a fresh uniformly random
// leaf, flushes the path greedily deepest-first and writes the path back in
// one atomic backend Write of fresh encryptions of every bucket. A key not
// in the position map (a Get of a missing key, a Put of a new key, a
// Delete of a missing key, a Put into a full store) reads a uniformly
// random path, so existence never leaks. One access runs at a time, in
// the order the operations arrive (turns.go).
//
// The package owns the trusted state: the position map (block ID, a PRF
// of the key, to leaf), each stored key's name beside its block ID (for
// kv.KeyLister), the stash and one version per bucket. Every bucket is sealed bound to its address, slot
// and version (tree.Codec), so storage that flips bits, moves, deletes or
// replays an older copy of a bucket yields kv.ErrTampered, never wrong or
// stale data. It also owns storage's view of the tree (view.go) and its
// registration with `oblivkv audit` (audit.go). It must never make an
// access whose backend calls depend on the operation, the key or whether
// the key exists, and never treat a missing bucket as empty.
//
// # Restart and crashes
//
// The trusted state is journaled on the proxy's disk (internal/durable):
// every access, before its write-back is issued and before it returns,
// records its changes to the position map and the stash with the sealed
// buckets it writes; every DefaultEvery accesses, and at Close, a
// checkpoint of the whole state replaces the journal. Opening an existing
// store loads the checkpoint, replays the accesses after it and writes
// their buckets again, in order: a crash (kill -9, power loss under the
// default fsync policy) loses no acknowledged access, and storage sees
// again only writes it saw, or would have seen, before. Storage restored
// from a copy older than the proxy's checkpoint is refused at open.
//
// A failed write-back (storage unreachable) is retried before the next
// access, so storage never falls behind the proxy; the failed operation
// reports the error, and its effect, if any, is kept.
//
// Each access journals the path it is about to read before the Read; one
// whose Read failed or that a crash cut short before its write-back is
// finished first by the next access, by recovery or at Close: the same
// path is read again and written back with the block on a fresh leaf, so
// the block's next access never reads the path storage saw read.
//
// Group commit, with the fsync off the serial path: an access journals,
// with its write-back, the path reads of up to two accesses waiting for
// their turns, and when another access waits, it hands its write-back
// to that access instead of waiting for its record's fsync itself. The
// next access then reads its own path while that fsync runs (its read
// was made durable by an fsync before), taking the buckets the
// write-back in flight rewrites from it rather than from storage, and
// issues the write-back once its record is durable, before its own. So
// storage sees the next access's Read before the Write of the access
// before it, never a Write before its record is durable, and a Read only
// once its plan is; no access answers before its write-back is issued.
// A planned read also fixes the leaf its access moves the block to, so
// that a read planned after it for the same block reads that leaf: reads
// are planned two ahead whatever the keys, and when a read comes tells
// storage nothing of which keys follow one another. A crash can leave
// two accesses cut short after their reads; recovery finishes both, in
// order, each moving its block to the leaf planned. An access after
// which a checkpoint is due (a count of accesses, never of records,
// whose number depends on which keys are queued) writes back itself,
// and the checkpoint journals the reads planned ahead again after it,
// for recovery to finish if a crash comes first.
package pathoram

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
	"github.com/oblivkv/oblivkv/seal"
)

func init() {
	kv.Register(kv.Protocol{
		Name:    "pathoram",
		Summary: "classic sequential Path ORAM, one request at a time (TaoStore Sec. IV-A): the reference point",
		Open:    open,
		Options: Options{},
		Audit:   auditSpec,
		Reseal:  newResealer,
	})
}

// treePrefix begins the address of every bucket (then 8 bytes).
const treePrefix = "po/"

type store struct {
	kv.ByUpdate // Get, Put and Delete: Updates of the store itself

	keys  *seal.Keys
	b     backend.Backend
	opts  Options
	codec *tree.Codec
	log   *durable.Log

	turns  turns // one operation at a time, in arrival order
	o      *oram
	remote *remote
	// loadCut: the last record replayed began a bulk load, never
	// checkpointed (recover writes the tree afresh).
	loadCut bool
	// accesses counts the accesses since the last checkpoint (due).
	accesses uint64

	// Copies of the counters for Stats, which never waits for an access.
	keyCount, stashSize, stashMax atomic.Int64
}

// open is pathoram's kv.Factory.
func open(ctx context.Context, env kv.Env) (kv.Store, error) {
	opts, err := kv.ResolveOptions[Options]("pathoram", env)
	if err != nil {
		return nil, err
	}
	if opts.TestingKnobs.Leak, err = envLeak(opts.TestingKnobs.Leak); err != nil { // a leak only in oblivkv_leaks builds (leak.go)
		return nil, err
	}
	g := tree.NewGeometry(env.Capacity)
	codec := tree.NewCodec(env.Keys, opts.Z, env.ValueSize)
	log := durable.New(env.Journal, env.Backend, env.Keys)
	r := &remote{b: env.Backend, layout: tree.Layout{Prefix: treePrefix}, codec: codec, log: log,
		batchBytes: opts.BatchBytes, versions: make([]uint64, g.Buckets()), leak: opts.TestingKnobs.Leak}
	seed, err := random.Root(opts.TestingKnobs.Seed)
	if err != nil {
		return nil, fmt.Errorf("pathoram: %w", err)
	}
	if opts.TestingKnobs.Leak == leakFixedSeed {
		seed = random.Seed{}
	}
	s := &store{keys: env.Keys, b: env.Backend, opts: opts, codec: codec, remote: r, log: log,
		o: newORAM(g, opts.Z, env.Capacity, env.ValueSize, r, seed)}
	s.o.leak, s.o.traced = opts.TestingKnobs.Leak, opts.TestingKnobs.Trace
	s.turns.queued = opts.TestingKnobs.Queued
	s.ByUpdate = kv.ByUpdate{Updater: s}
	if env.Fresh {
		// A fresh tree of dummy buckets, written in large batches, then
		// the journal's first checkpoint.
		err = r.writeTree(ctx, func(uint64) []tree.Block { return nil })
		if err == nil {
			err = log.Create(ctx, s.encodeState())
		}
	} else {
		err = s.recover(ctx)
	}
	if err != nil {
		return nil, err
	}
	s.publish()
	return s, nil
}

// publish copies the counters Stats reports; the store's turn is held,
// or s is not shared yet.
func (s *store) publish() {
	s.keyCount.Store(int64(len(s.o.pos)))
	s.stashSize.Store(int64(len(s.o.stash)))
	s.stashMax.Store(int64(s.o.stashMax))
}

// Update implements kv.Updater: every mutation is one access, as a Get is
// (kv.ByUpdate). A new key in a full store still costs a full access, then
// fails with kv.ErrFull. An access that leaves its write-back in flight
// for the next (remote.writePath) returns once the next has issued it.
func (s *store) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	res, w, err := s.update(ctx, key, m)
	if w != nil { // handed on: err is nil
		err = w.Wait()
	}
	switch {
	case err != nil:
		return kv.Result{}, fmt.Errorf("pathoram: %w", err)
	case res.full:
		return kv.Result{}, fmt.Errorf("%w: %d keys", kv.ErrFull, s.o.capacity)
	}
	return res.Result, res.rejected
}

// update is Update's access, in its turn. It issues the write-back in
// flight if the access did not, and checkpoints when one is due, which
// an access then never leaves in flight; nor does an access of a store
// without a journal, which has no fsync to hide.
func (s *store) update(ctx context.Context, key string, m kv.Mutation) (result, *writeBack, error) {
	id := tree.IDOf(s.keys, key)
	s.turns.take(&turn{access: true, upcomingAccess: upcomingAccess{block: id, read: m.Op == kv.MutRead}})
	defer s.turns.done()
	defer s.publish()
	s.accesses++
	due := s.due()
	res, w, err := s.o.access(ctx, id, key, m, s.turns.upcoming, s.log.Durable() && !due)
	if w == nil {
		s.remote.finishInflight()
		if err == nil && due {
			err = s.checkpoint(ctx)
		}
	}
	return res, w, err
}

// due reports whether a checkpoint is due after the access running. It
// counts accesses, two records each (its path read's and its
// write-back's), never the records themselves: how many reads are
// planned ahead when it is asked depends on which keys are queued, and
// storage sees when a checkpoint comes.
func (s *store) due() bool {
	return s.log.Durable() && 2*s.accesses >= s.log.Every()
}

// JournalsEveryWrite implements kv.WriteJournaler: every backend write
// is journaled, with its data, before it is issued.
func (s *store) JournalsEveryWrite() bool { return s.log.Durable() }

// Stats implements kv.Store. Extra holds, in this order: stash_size (blocks
// in the stash now), stash_max (its high-water mark since the store was
// created, both counted after each write-back), tree_levels (L+1) and
// bucket_bytes (one sealed bucket).
func (s *store) Stats() kv.Stats {
	return kv.Stats{Keys: s.keyCount.Load(), Extra: []kv.Stat{
		{Name: kv.StatStashSize, Value: float64(s.stashSize.Load())},
		{Name: kv.StatStashMax, Value: float64(s.stashMax.Load())},
		{Name: kv.StatTreeLevels, Value: float64(s.o.g.L + 1)},
		{Name: kv.StatBucketBytes, Value: float64(s.codec.BucketSize())},
	}}
}

// Close implements kv.Store: it writes any pending write-back, replaces
// the journal by a checkpoint and closes the backend.
func (s *store) Close() error {
	s.turns.exclusive()
	defer s.turns.done()
	err := s.checkpoint(context.Background())
	if err != nil {
		err = fmt.Errorf("pathoram: closing without a checkpoint; the next open replays the journal: %w", err)
	}
	return errors.Join(err, s.b.Close())
}
