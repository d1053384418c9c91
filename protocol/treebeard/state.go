package treebeard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/gob"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"

	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
)

// state is a checkpoint: what the trusted layers keep. The position map and
// stash are kept whole, not per shard, so the number of Stash shards may
// change between runs; the trees may not. The shards' random sources are
// not kept: a store opened again draws from fresh seeds, since the draws
// made after the checkpoint may have shown on storage, and drawing them
// again would link what storage saw before a crash to what it sees after.
type state struct {
	Initialised bool
	Pos         map[tree.BlockID]Position
	Stash       map[tree.BlockID][]byte
	Trees       []TreeSnapshot
}

// Load implements kv.Loader: every item gets a random tree and leaf and
// the deepest free bucket on its path (overflow goes to its shard's
// stash), and every tree is written once, in large batches.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if n := s.quota.used.Load(); n > 0 {
		return int(n), kv.ErrNotEmpty
	}
	values := map[tree.BlockID][]byte{}
	for k, v := range items {
		values[s.id(k)] = append([]byte{}, v...)
		if int64(len(values)) > s.quota.capacity {
			return 0, fmt.Errorf("%w: %d keys", kv.ErrFull, s.quota.capacity)
		}
	}
	placed := make([][][]ringoram.Block, len(s.workers))
	for t := range placed {
		placed[t] = make([][]ringoram.Block, s.geo.Buckets())
	}
	seeds, err := newSeeds(s.opts)
	if err != nil {
		return 0, err
	}
	r := rand.New(random.New(seeds()))
	all := ShardBlocks{Pos: map[tree.BlockID]Position{}, Stash: map[tree.BlockID][]byte{}}
	for id, v := range values {
		p := Position{Tree: r.IntN(len(s.workers)), Leaf: r.Uint64N(s.geo.Leaves())}
		all.Pos[id] = p
		if !tree.PlaceDeepest(s.geo, placed[p.Tree], s.opts.Z, p.Leaf, ringoram.Block{Block: tree.Block{ID: id, Value: v}, Leaf: p.Leaf}) {
			all.Stash[id] = v
		}
	}
	if err := s.install(all); err != nil {
		return 0, err
	}
	// Journaled first: a crash while the trees are written leaves trees
	// that match no state, and recovery writes them afresh.
	if _, err := s.log.Commit([]byte{deltaLoad}); err != nil {
		return 0, fmt.Errorf("treebeard: %w", err)
	}
	if err := s.initTrees(ctx, placed); err != nil {
		return 0, err
	}
	if err := s.log.Checkpoint(ctx, s.encodeStateAs(true), s.log.Last()); err != nil {
		return 0, err
	}
	s.initialised.Store(true)
	return len(values), nil
}

// Snapshot returns the trusted state as a checkpoint holds it, for
// durable.Log.CheckpointOf.
func (s *store) Snapshot() ([]byte, error) { return s.encodeStateAs(s.initialised.Load()), nil }

// encodeStateAs is Snapshot with the trees written (initialised) or not.
func (s *store) encodeStateAs(initialised bool) []byte {
	st := state{Initialised: initialised, Pos: map[tree.BlockID]Position{}, Stash: map[tree.BlockID][]byte{}}
	for _, a := range s.shardAdmins {
		b := s.admin(a, AdminMsg{Op: AdminState}).Blocks
		maps.Copy(st.Pos, b.Pos)
		maps.Copy(st.Stash, b.Stash)
	}
	if initialised {
		for t, a := range s.treeAdmins {
			st.Trees = append(st.Trees, s.admin(a, AdminMsg{Op: AdminState, Tree: t}).State)
		}
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(st); err != nil {
		panic(fmt.Sprintf("treebeard: encoding the state: %v", err)) // plain data: cannot fail
	}
	return buf.Bytes()
}

// create starts the journal of a new store: the checkpoint of its empty
// state, the trees not yet written (ensureInit or Load write them).
func (s *store) create(ctx context.Context) error {
	return s.log.Create(ctx, s.encodeStateAs(false))
}

// checkpointNow replaces the journal by a checkpoint while the store
// serves: it pauses the Routers (requests collect in their epochs), waits
// until every epoch forwarded is answered and every tree has finished its
// reads and evictions, checkpoints the state, and resumes. It runs every
// durable.DefaultEvery records, which depends only on the epochs and the
// trees' operations, so the pause shows storage nothing more.
func (s *store) checkpointNow(ctx context.Context) error {
	for _, r := range s.routers {
		r.pause()
	}
	defer func() {
		for _, r := range s.routers {
			r.resume()
		}
	}()
	for _, r := range s.routers {
		r.waitForwarded()
	}
	for _, w := range s.workers {
		w.waitIdle()
	}
	return s.log.CheckpointOf(ctx, s)
}

// reopen builds the layers of an existing store and recovers its state
// from log (durable.Log.Replay, driving a reopening), then finishes what
// the journal left unfinished (recover).
func reopen(ctx context.Context, env kv.Env, given, opts Options, log *durable.Log) (*store, error) {
	r := &reopening{env: env, given: given, opts: opts, log: log}
	if _, err := log.Replay(ctx, r); err != nil {
		return nil, fmt.Errorf("treebeard: %w", err)
	}
	return r.s, r.s.recover(ctx, r.rp)
}

// reopening is the durable.Machine of a store being reopened. The layout
// its trees were written with is in its checkpoint, so Restore builds the
// layers: Trees, Z, S and CachedLevels left to their defaults take it from
// there, so a store made when the defaults were others opens as it was
// made. Apply replays a record into the layers (replayer).
type reopening struct {
	env         kv.Env
	given, opts Options
	log         *durable.Log
	s           *store    // built by Restore
	rp          *replayer // replays the records after the checkpoint into s
}

// Restore implements durable.Machine: it builds the layers the checkpoint
// was written with and restores their state.
func (r *reopening) Restore(b []byte) error {
	var st state
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&st); err != nil {
		return fmt.Errorf("%w: decoding the checkpoint: %v", kv.ErrTampered, err)
	}
	opts := r.opts
	if len(st.Trees) > 0 {
		made, given := st.Trees[0].Tree, r.given
		given.Trees = cmp.Or(given.Trees, len(st.Trees))
		given.Z, given.S = cmp.Or(given.Z, made.Z), cmp.Or(given.S, made.S)
		if given.CachedLevels == 0 {
			given.CachedLevels = cmp.Or(made.CachedLevels, -1) // -1: none
		}
		opts = given.EnsureDefaults(r.env.Capacity)
		if err := opts.Validate(r.env.Capacity); err != nil {
			return fmt.Errorf("%w: %v", kv.ErrMismatch, err)
		}
	}
	s, err := build(r.env, opts, r.log)
	if err != nil {
		return err
	}
	r.s, r.rp = s, &replayer{s: s, pending: map[int][]ringoram.Placement{}, plans: map[int]ringoram.Plan{}, ops: map[int][]*journaledOp{}}
	return s.restore(st)
}

// Apply implements durable.Machine: it replays a record into the layers.
func (r *reopening) Apply(rec []byte) error { return r.rp.apply(rec) }

// Snapshot implements durable.Machine: the state of the store reopened.
func (r *reopening) Snapshot() ([]byte, error) { return r.s.Snapshot() }

// recover finishes a recovery once the checkpoint is restored, every
// record after it replayed (the blocks of each epoch, each tree
// operation's Change and the blocks it took, each eviction's end) and the
// trees' writes issued again: an eviction whose end is missing is
// settled; a bulk load cut short leaves an empty store whose trees are
// written afresh; an operation a crash cut short after its plan was
// journaled is issued again identically (treeWorker.resume); evictions a
// tree owes run; then a checkpoint.
func (s *store) recover(ctx context.Context, rp *replayer) error {
	if err := s.claimFences(ctx); err != nil {
		return err
	}
	if s.initialised.Load() && !rp.load {
		if err := rp.settleOps(ctx); err != nil {
			return err
		}
	}
	rp.finish()
	if s.opts.TestingKnobs.Leak == leakRecoveryChecksPositions {
		if err := s.checkPositions(ctx); err != nil {
			return err
		}
	}
	keys := 0
	for _, sh := range s.stashes {
		if rp.load {
			sh.core.clearBlocks()
		}
		keys += len(sh.core.pos)
	}
	s.quota.used.Store(int64(keys))
	if rp.load {
		s.initialised.Store(false) // the trees are written afresh at the first access
	}
	if s.initialised.Load() {
		for t, w := range s.workers {
			owed := w.core.served(0)
			if p, ok := rp.plans[t]; ok && s.opts.TestingKnobs.Leak != leakRecoveryForgetsPlans {
				if err := w.resume(ctx, p, s.stashTaken); err != nil {
					return fmt.Errorf("treebeard: tree %d: the operation a crash cut short, issued again: %w", t, err)
				}
				owed = max(0, owed-p.Evict) // an eviction resumed was owed
			}
			if owed > 0 {
				w.evict(ctx, owed) // one that fails leaves its blocks stashed, as in service
			}
		}
	}
	return s.log.CheckpointOf(ctx, s)
}

func (s *store) restore(st state) error {
	if st.Initialised && len(st.Trees) != len(s.workers) {
		return fmt.Errorf("%w: the store has %d trees, the options ask for %d", kv.ErrMismatch, len(st.Trees), len(s.workers))
	}
	for t, ts := range st.Trees {
		if rep := s.admin(s.treeAdmins[t], AdminMsg{Op: AdminRestore, Tree: t, State: ts}); rep.Code != CodeOK {
			return rep.Err()
		}
	}
	for _, p := range st.Pos {
		if p.Tree < 0 || p.Tree >= len(s.workers) || p.Leaf >= s.geo.Leaves() {
			return fmt.Errorf("%w: a block's position is outside the trees", kv.ErrMismatch)
		}
	}
	if err := s.install(ShardBlocks{Pos: st.Pos, Stash: st.Stash}); err != nil {
		return err
	}
	s.initialised.Store(st.Initialised)
	return nil
}

// install hands every Stash shard the blocks of all that hash to it, in
// place of its own (AdminInstall), and sets the key count.
func (s *store) install(all ShardBlocks) error {
	shards := make([]ShardBlocks, len(s.stashes))
	for i := range shards {
		shards[i] = ShardBlocks{Pos: map[tree.BlockID]Position{}, Stash: map[tree.BlockID][]byte{}}
	}
	for id, p := range all.Pos {
		shards[shardOf(id, len(s.stashes))].Pos[id] = p
	}
	for id, v := range all.Stash {
		shards[shardOf(id, len(s.stashes))].Stash[id] = v
	}
	for i, sh := range shards {
		if rep := s.admin(s.shardAdmins[i], AdminMsg{Op: AdminInstall, Blocks: sh}); rep.Code != CodeOK {
			return rep.Err()
		}
	}
	s.quota.used.Store(int64(len(all.Pos)))
	return nil
}

// JournalsEveryWrite implements kv.WriteJournaler: what rebuilds every
// backend write is journaled before it is issued (a tree's operation,
// whose Write recovery makes again when storage lacks it: settleOps).
func (s *store) JournalsEveryWrite() bool { return s.log.Durable() }

// Stats reports the layers' counters, asked of each layer (AdminStats):
// stash sizes, real and fake reads, the trees' reads, reshuffles and
// evictions, and the messages resent and answered as copies; and the
// requests the Routers' epochs are collecting.
func (s *store) Stats() kv.Stats {
	var sum LayerStats
	for _, a := range s.shardAdmins {
		sum.add(s.admin(a, AdminMsg{Op: AdminStats}).Stats)
	}
	for t, a := range s.treeAdmins {
		sum.add(s.admin(a, AdminMsg{Op: AdminStats, Tree: t}).Stats)
	}
	t := sum.Tree
	perPath := 0.0
	if t.PathReads > 0 {
		perPath = float64(t.BucketsRead) / float64(t.PathReads)
	}
	return kv.Stats{Keys: s.quota.used.Load(), Extra: []kv.Stat{
		{Name: kv.StatTrees, Value: float64(len(s.workers))},
		{Name: kv.StatTreeLevels, Value: float64(s.geo.L + 1)},
		{Name: kv.StatBucketZ, Value: float64(s.opts.Z)},
		{Name: kv.StatBucketS, Value: float64(s.opts.S)},
		{Name: kv.StatCachedLevels, Value: float64(cachedLevels(s.opts.CachedLevels, s.geo.L))},
		{Name: kv.StatCachedBlocks, Value: float64(t.CachedBlocks)},
		{Name: kv.StatCacheHits, Value: float64(t.CachedHits)},
		{Name: kv.StatStashShards, Value: float64(len(s.stashes))},
		{Name: kv.StatStashSize, Value: float64(sum.StashSize)},
		{Name: kv.StatStashMax, Value: float64(sum.StashMax)},
		{Name: kv.StatRealReads, Value: float64(sum.RealReads)},
		{Name: kv.StatFakeReads, Value: float64(sum.FakeReads)},
		{Name: kv.StatStashHits, Value: float64(sum.StashHits)},
		{Name: kv.StatPathReads, Value: float64(t.PathReads)},
		{Name: kv.StatMultiPathReads, Value: float64(t.MultiReads)},
		{Name: kv.StatBucketsPerPath, Value: perPath},
		{Name: kv.StatReshuffles, Value: float64(t.Reshuffles)},
		{Name: kv.StatEvictions, Value: float64(t.Evictions)},
		{Name: kv.StatEvictedPaths, Value: float64(t.EvictedPaths)},
		{Name: kv.StatReadErrors, Value: float64(sum.ReadErrors)},
		{Name: kv.StatReadRetries, Value: float64(t.ReadRetries)},
		{Name: kv.StatMetadataReads, Value: float64(t.MetaReads)},
		{Name: kv.StatEvictionErrors, Value: float64(sum.EvictionErrors)},
		{Name: kv.StatMessagesResent, Value: float64(s.net.resent.Load() + s.adminNet.resent.Load())},
		{Name: kv.StatMessageCopies, Value: float64(sum.Copies)},
		{Name: kv.StatRepliesHeld, Value: float64(sum.Held)},
		{Name: kv.StatEpochRequests, Value: float64(s.collecting())},
	}}
}

// collecting returns the number of requests the Routers' collecting
// epochs hold.
func (s *store) collecting() int {
	n := 0
	for _, r := range s.routers {
		n += r.collecting()
	}
	return n
}

// admin sends a layer the store's message m, again while it is lost in
// transit, even while the store closes (its last checkpoint needs them).
func (s *store) admin(to Admin, m AdminMsg) AdminReply {
	m.ID = s.net.msgID(Endpoint{LayerStore, 0}, s.adminSeq.Add(1), 0)
	return send(s.adminNet, func() AdminReply { return to.Admin(m) })
}
