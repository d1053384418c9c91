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
// random path, so existence never leaks. One access runs at a time.
//
// The package owns the trusted state: the position map (block ID, a PRF
// of the key, to leaf; keys themselves are never kept), the stash and one
// version per bucket. Every bucket is sealed bound to its address, slot
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
package pathoram

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	})
}

// Options are pathoram's parameters, passed as kv.Config.Options (an
// Options or *Options; nil means the defaults).
type Options struct {
	// Z is the number of block slots per bucket (default 4, as in the
	// paper, Sec. IV-A). A store must be reopened with the Z it was
	// created with.
	Z int `opt:"Block slots per bucket." default:"4"`
	// BatchBytes bounds one backend write when the whole tree is written
	// (initialisation, bulk load; default 4 MiB).
	BatchBytes int `opt:"Largest backend write when the whole tree is written (initialisation, bulk load)." default:"4194304"`

	seed *[32]byte // tests only: makes leaf choices reproducible
	leak leak      // tests only: a flaw injected to show an audit catches it (leak.go)
	// traced, tests only, is told the leaf and block of every access's
	// path read, in order, before it is issued: the ground truth of which
	// read was which key's.
	traced func(leaf uint64, id tree.BlockID)
}

// DefaultZ is the default number of slots per bucket.
const DefaultZ = 4

// maxZ bounds Z: beyond it Path ORAM makes little sense and a bucket's
// slot count would overflow the state format's checks.
const maxZ = 255

func optionsOf(v any) (Options, error) {
	o, err := kv.OptionsOf[Options]("pathoram", v)
	if err != nil {
		return o, err
	}
	if o.Z == 0 {
		o.Z = DefaultZ
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = tree.DefaultBatchBytes
	}
	if o.Z < 1 || o.Z > maxZ {
		return o, fmt.Errorf("pathoram: Z must be between 1 and %d, got %d", maxZ, o.Z)
	}
	return o, nil
}

// treePrefix begins the address of every bucket (then 8 bytes).
const treePrefix = "po/"

type store struct {
	keys  *seal.Keys
	b     backend.Backend
	opts  Options
	codec *tree.Codec
	log   *durable.Log

	mu     sync.Mutex // one access at a time
	o      *oram
	remote *remote

	// Copies of the counters for Stats, which never waits for an access.
	keyCount, stashSize, stashMax atomic.Int64
}

// open is pathoram's kv.Factory.
func open(ctx context.Context, env kv.Env) (kv.Store, error) {
	opts, err := optionsOf(env.Options)
	if err != nil {
		return nil, err
	}
	if opts.leak, err = envLeak(opts.leak); err != nil { // a leak only in oblivkv_leaks builds (leak.go)
		return nil, err
	}
	g := tree.NewGeometry(env.Capacity)
	codec := tree.NewCodec(env.Keys, opts.Z, env.ValueSize)
	log := durable.New(env.Journal, env.Backend, env.Keys)
	r := &remote{b: env.Backend, layout: tree.Layout{Prefix: treePrefix}, codec: codec, log: log,
		batchBytes: opts.BatchBytes, versions: make([]uint64, g.Buckets()), leak: opts.leak}
	seed, err := random.Root(opts.seed)
	if err != nil {
		return nil, fmt.Errorf("pathoram: %w", err)
	}
	if opts.leak == leakFixedSeed {
		seed = random.Seed{}
	}
	s := &store{keys: env.Keys, b: env.Backend, opts: opts, codec: codec, remote: r, log: log,
		o: newORAM(g, opts.Z, env.Capacity, env.ValueSize, r, seed)}
	s.o.leak, s.o.traced = opts.leak, opts.traced
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

// publish copies the counters Stats reports; s.mu is held or s is not
// shared yet.
func (s *store) publish() {
	s.keyCount.Store(int64(len(s.o.pos)))
	s.stashSize.Store(int64(len(s.o.stash)))
	s.stashMax.Store(int64(s.o.stashMax))
}

func (s *store) do(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	id := tree.IDOf(s.keys, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	res, err := s.o.access(ctx, id, m)
	if err == nil && s.log.Due() {
		err = s.checkpoint(ctx)
	}
	s.publish()
	switch {
	case err != nil:
		return kv.Result{}, fmt.Errorf("pathoram: %w", err)
	case res.full:
		return kv.Result{}, fmt.Errorf("%w: %d keys", kv.ErrFull, s.o.capacity)
	}
	return res.Result, res.rejected
}

// Get implements kv.Store.
func (s *store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	res, err := s.do(ctx, key, kv.Mutation{Op: kv.MutRead})
	return res.Old, res.Found, err
}

// Put implements kv.Store. A new key in a full store still costs a full
// access, then fails with kv.ErrFull.
func (s *store) Put(ctx context.Context, key string, val []byte) error {
	_, err := s.do(ctx, key, kv.Mutation{Op: kv.MutSet, Arg: val})
	return err
}

// Delete implements kv.Store.
func (s *store) Delete(ctx context.Context, key string) error {
	_, err := s.do(ctx, key, kv.Mutation{Op: kv.MutDelete})
	return err
}

// Update implements kv.Updater: every mutation is one access, as a Get is.
func (s *store) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	return s.do(ctx, key, m)
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
		{Name: "stash_size", Value: float64(s.stashSize.Load())},
		{Name: "stash_max", Value: float64(s.stashMax.Load())},
		{Name: "tree_levels", Value: float64(s.o.g.L + 1)},
		{Name: "bucket_bytes", Value: float64(s.codec.BucketSize())},
	}}
}

// Close implements kv.Store: it writes any pending write-back, replaces
// the journal by a checkpoint and closes the backend.
func (s *store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.checkpoint(context.Background())
	if err != nil {
		err = fmt.Errorf("pathoram: closing without a checkpoint; the next open replays the journal: %w", err)
	}
	return errors.Join(err, s.b.Close())
}
