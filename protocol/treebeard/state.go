package treebeard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
)

// state is the trusted state of the whole store as an earlier build's
// checkpoint held it (machine 0: reopenEarlier), and as the store moves
// it between two numbers of Stash shards (reshard). The position map,
// stash and keys' names (none in an earlier build's) are whole, not per
// shard. The shards' random sources are not
// kept: a store opened again draws from fresh seeds, since the draws
// made after the checkpoint may have shown on storage, and drawing them
// again would link what storage saw before a crash to what it sees after.
type state struct {
	Initialised bool
	Pos         map[tree.BlockID]Position
	Stash       map[tree.BlockID][]byte
	Names       map[tree.BlockID]string
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
	values, names := map[tree.BlockID][]byte{}, map[tree.BlockID]string{}
	for k, v := range items {
		id := s.id(k)
		values[id], names[id] = append([]byte{}, v...), k
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
	all := ShardBlocks{Pos: map[tree.BlockID]Position{}, Stash: map[tree.BlockID][]byte{}, Names: names}
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
	// Journaled first, in every tree's log: a crash while the trees are
	// written leaves trees that match no state, and recovery writes them
	// afresh.
	var lsn uint64
	for _, w := range s.workers {
		lsn = w.log.Append([]byte{deltaLoad})
	}
	if err := s.log.Sync(lsn); err != nil {
		return 0, fmt.Errorf("treebeard: %w", err)
	}
	if err := s.initTrees(ctx, placed); err != nil {
		return 0, err
	}
	if err := s.checkpointAll(ctx, true); err != nil {
		return 0, err
	}
	s.initialised.Store(true)
	return len(values), nil
}

// encodeState returns the trusted state of the whole store (reshard).
func (s *store) encodeState() state {
	st := state{Initialised: s.initialised.Load(), Pos: map[tree.BlockID]Position{}, Stash: map[tree.BlockID][]byte{},
		Names: map[tree.BlockID]string{}}
	for _, a := range s.shardAdmins {
		b := s.admin(a, AdminMsg{Op: AdminState}).Blocks
		maps.Copy(st.Pos, b.Pos)
		maps.Copy(st.Stash, b.Stash)
		maps.Copy(st.Names, b.Names)
	}
	if st.Initialised {
		for t, a := range s.treeAdmins {
			st.Trees = append(st.Trees, s.admin(a, AdminMsg{Op: AdminState, Tree: t}).State)
		}
	}
	return st
}

// create starts the journal of a new store: the checkpoint of each
// machine's empty state, the trees not yet written (ensureInit or Load
// write them).
func (s *store) create(ctx context.Context) error {
	states := map[durable.MachineID][]byte{}
	for i, st := range s.stashes {
		states[stashMachineID(i)] = st.core.checkpoint()
	}
	for t, w := range s.workers {
		states[treeMachineID(t)] = w.checkpoint(false)
	}
	return s.log.CreateMachines(ctx, states)
}

// checkpointAll checkpoints every machine at the journal's last record,
// with its trees written (initialised) or not, once the checkpoints under
// way are written and the trees' Writes are on storage, with one anchor
// (durable.Log.CheckpointMachines): the Stash shards' first, then the
// trees', so that a crash between them leaves a tree's record of a bulk
// load that every shard's checkpoint may already hold, never the reverse.
// No machine steps meanwhile: the store is not serving, or not yet.
func (s *store) checkpointAll(ctx context.Context, initialised bool) error {
	err := s.ckpt.wait()
	for _, w := range s.workers {
		if ferr := w.flush(ctx); ferr != nil {
			return errors.Join(err, ferr)
		}
	}
	at, states := s.log.Last(), map[durable.MachineID][]byte{}
	for i, st := range s.stashes {
		st.mu.Lock()
		states[stashMachineID(i)] = st.core.checkpoint()
		st.mu.Unlock()
	}
	for t, w := range s.workers {
		w.mu.Lock()
		states[treeMachineID(t)] = w.checkpoint(initialised)
		w.mu.Unlock()
	}
	if err := errors.Join(err, s.log.CheckpointMachines(ctx, states, at)); err != nil {
		return fmt.Errorf("treebeard: %w", err)
	}
	return nil
}

// reopen builds the machines of an existing store from the checkpoints
// in its journal and recovers each from its own checkpoint and records
// (durable.Log.ReplayMachines), then delivers what one machine owes
// another and finishes what the journal left unfinished (recover). A
// journal of an earlier build, the whole store as machine 0, is the
// upgrade path (reopenEarlier).
func reopen(ctx context.Context, env kv.Env, given, opts Options, log *durable.Log) (*store, error) {
	cps := log.Checkpointed()
	if len(cps[legacyMachine]) > 0 {
		return reopenEarlier(ctx, env, given, opts, log, cps)
	}
	shards, trees := 0, 0
	for len(cps[stashMachineID(shards)]) > 0 { // a retired machine's is empty
		shards++
	}
	for len(cps[treeMachineID(trees)]) > 0 {
		trees++
	}
	var first treeCheckpoint
	if err := decodeGob(cps[treeMachineID(0)], &first); err != nil {
		return nil, fmt.Errorf("%w: decoding tree 0's checkpoint: %v", kv.ErrTampered, err)
	}
	var made *TreeSnapshot
	if first.Initialised {
		made = &first.State
	}
	o, err := layoutOf(env, given, opts, made, trees)
	if err != nil {
		return nil, err
	}
	o.StashShards = shards
	if made == nil {
		o.Trees = trees // not written yet: the journal's trees
	}
	s, err := build(env, o, log)
	if err != nil {
		return nil, err
	}
	rp, err := s.replay(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.recover(ctx, rp); err != nil {
		return nil, err
	}
	if given.StashShards > 0 && given.StashShards != shards {
		return s.reshard(ctx, env, given.StashShards)
	}
	return s, nil
}

// replay rebuilds every machine from its own checkpoint and records.
func (s *store) replay(ctx context.Context) (*replayer, error) {
	rp := newReplayer(s, false)
	machines := map[durable.MachineID]durable.Machine{}
	for i, st := range s.stashes {
		machines[stashMachineID(i)] = stashReplay{s: s, st: st}
	}
	initialised := make([]bool, len(s.workers))
	for t, w := range s.workers {
		machines[treeMachineID(t)] = treeReplay{rp: rp, w: w, initialised: &initialised[t]}
	}
	if _, err := s.log.ReplayMachines(ctx, machines); err != nil {
		return nil, fmt.Errorf("treebeard: %w", err)
	}
	s.initialised.Store(!slices.Contains(initialised, false))
	return rp, nil
}

// layoutOf returns the options of a store whose trees were made as made
// says (nil: not written yet): Trees, Z, S and CachedLevels left to their
// defaults take it from there, so a store made when the defaults were
// others opens as it was made.
func layoutOf(env kv.Env, given, opts Options, made *TreeSnapshot, trees int) (Options, error) {
	if made == nil {
		return opts, nil
	}
	given.Trees = cmp.Or(given.Trees, trees)
	given.Z, given.S = cmp.Or(given.Z, made.Tree.Z), cmp.Or(given.S, made.Tree.S)
	if given.CachedLevels == 0 {
		given.CachedLevels = cmp.Or(made.Tree.CachedLevels, -1) // -1: none
	}
	opts = given.EnsureDefaults(env.Capacity)
	if err := opts.Validate(env.Capacity); err != nil {
		return opts, fmt.Errorf("%w: %v", kv.ErrMismatch, err)
	}
	if opts.Trees != trees {
		return opts, fmt.Errorf("%w: the store has %d trees, the options ask for %d", kv.ErrMismatch, trees, opts.Trees)
	}
	return opts, nil
}

// encodeGob encodes a machine's image or checkpoint, plain data
// (encoding it cannot fail).
func encodeGob(v any) []byte {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		panic(fmt.Sprintf("treebeard: encoding a %T: %v", v, err))
	}
	return buf.Bytes()
}

func decodeGob(b []byte, v any) error { return gob.NewDecoder(bytes.NewReader(b)).Decode(v) }

// stashReplay is a Stash shard's machine as its log rebuilds it.
type stashReplay struct {
	s  *store
	st *Stash
}

func (r stashReplay) Restore(b []byte) error { return r.st.core.restoreCheckpoint(b) }

func (r stashReplay) Snapshot() ([]byte, error) { return r.st.core.checkpoint(), nil }

// Apply applies one of the shard's records: an epoch's blocks, or its
// answer to the end of an eviction. A block of another shard is
// malformed: no record crosses machines.
func (r stashReplay) Apply(rec []byte) error {
	d := delta.NewDecoder(rec)
	switch kind := d.Byte(); kind {
	case deltaBlocks:
		replayBlocks(d, r.s, func(id tree.BlockID) *stashCore {
			d.Check(shardOf(id, len(r.s.stashes)) == r.st.id, "a block of another Stash shard")
			return r.st.core
		})
	case deltaShardEvicted:
		replayEvicted(d, r.st.core)
	default:
		d.Check(d.Failed(), fmt.Sprint("a Stash shard's delta of kind ", kind))
	}
	if err := d.Done(); err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	return nil
}

// treeReplay is a tree's machine as its log rebuilds it (replayer).
type treeReplay struct {
	rp          *replayer
	w           *treeWorker
	initialised *bool // the checkpoint's trees are written
}

// Restore restores the tree's checkpoint: its trusted state, once
// written, the blocks it keeps for the Stash shards, and its record of
// the parts it answered and released.
func (r treeReplay) Restore(b []byte) error {
	var cp treeCheckpoint
	if err := decodeGob(b, &cp); err != nil {
		return fmt.Errorf("%w: decoding a tree's checkpoint: %v", kv.ErrTampered, err)
	}
	*r.initialised = cp.Initialised
	r.w.m.kept, r.w.m.msgs = cp.Kept, msgTableOf(cp.Messages)
	if !cp.Initialised {
		return nil
	}
	return r.w.restore(cp.State)
}

func (r treeReplay) Snapshot() ([]byte, error) { return r.w.checkpoint(*r.initialised), nil }

// Apply applies one of the tree's records; one of another tree is
// malformed.
func (r treeReplay) Apply(rec []byte) error {
	r.rp.tree = r.w.id
	return r.rp.apply(rec)
}

// recover finishes a recovery once every machine is rebuilt, its records
// replayed (the blocks of each epoch, each tree operation's Change and
// the blocks it took, each eviction's end) and the trees' writes issued
// again: the trees' evictions whose end is missing end (endEvictions); a
// bulk load cut short leaves an empty store whose trees are written
// afresh; then finishRecovery.
func (s *store) recover(ctx context.Context, rp *replayer) error {
	if err := s.settle(ctx, rp, rp.endEvictions); err != nil {
		return err
	}
	return s.finishRecovery(ctx, rp)
}

// settle claims the fences, settles the operations the trees journaled
// (settleOps) and the evictions whose end is missing (end), and forgets
// the blocks of a bulk load cut short.
func (s *store) settle(ctx context.Context, rp *replayer, end func() error) error {
	if err := s.claimFences(ctx); err != nil {
		return err
	}
	if s.initialised.Load() && !rp.load {
		if err := rp.settleOps(ctx); err != nil {
			return err
		}
	}
	if err := end(); err != nil {
		return err
	}
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
	return nil
}

// finishRecovery issues again, identically, each tree's operation a
// crash cut short after its plan was journaled (treeWorker.resume), runs
// the evictions the trees owe, hands the Stash shards the blocks the
// trees' reads took out for them (handBack), and checkpoints every
// machine.
func (s *store) finishRecovery(ctx context.Context, rp *replayer) error {
	if s.initialised.Load() {
		for t, w := range s.workers {
			owed := w.core.served(0)
			if p, ok := rp.plans[t]; ok && s.opts.TestingKnobs.Leak != leakRecoveryForgetsPlans {
				if err := w.resume(ctx, p); err != nil {
					return fmt.Errorf("treebeard: tree %d: the operation a crash cut short, issued again: %w", t, err)
				}
				owed = max(0, owed-p.Evict) // an eviction resumed was owed
			}
			if owed > 0 {
				w.evict(ctx, owed) // one that fails leaves its blocks stashed, as in service
			}
		}
	}
	s.handBack()
	return s.checkpointAll(ctx, s.initialised.Load())
}

// handBack hands each Stash shard the blocks the trees keep for it
// (handover): those whose epochs' records a crash cut off come back to
// the stash (stashCore.takeBack), the others change nothing. The trees
// then keep none: the checkpoint that follows holds the shards' blocks.
func (s *store) handBack() {
	for t, w := range s.workers {
		taken := make([][]ringoram.Block, len(s.stashes))
		for _, h := range w.m.kept {
			i := shardOf(h.Block.Block.ID, len(s.stashes))
			taken[i] = append(taken[i], h.Block)
		}
		for i, st := range s.stashes {
			if len(taken[i]) > 0 {
				st.apply(stashEntry{Kind: entryTaken, Tree: t, Taken: taken[i]})
			}
		}
		w.m.kept = nil
	}
}

// reopenEarlier is the upgrade path: it opens a store an earlier build
// journaled as one machine (machine 0, the whole store), replaying it
// with the whole store's replayer (reopening), settles what that leaves
// open, then checkpoints every machine in its own log, moves the plan of
// an operation a crash cut short to its tree's log and retires machine 0
// (and any machine the store does not have), before anything else is
// journaled. A machine an upgrade (or a reshard) cut short checkpointed is
// rebuilt from machine 0 again (upgradeCutShort).
func reopenEarlier(ctx context.Context, env kv.Env, given, opts Options, log *durable.Log, cps map[durable.MachineID][]byte) (*store, error) {
	r := &reopening{env: env, given: given, opts: opts, log: log}
	machines := map[durable.MachineID]durable.Machine{legacyMachine: r}
	for m := range cps {
		if m != legacyMachine {
			machines[m] = upgradeCutShort{}
		}
	}
	if _, err := log.ReplayMachines(ctx, machines); err != nil {
		return nil, fmt.Errorf("treebeard: %w", err)
	}
	s, rp := r.s, r.rp
	err := s.settle(ctx, rp, func() error { rp.finishEarlier(); return nil })
	if err == nil {
		err = s.checkpointAll(ctx, s.initialised.Load())
	}
	var lsn uint64
	for t, p := range rp.plans {
		lsn = s.workers[t].log.Append(planDelta(t, p))
	}
	if err == nil {
		err = s.log.Sync(lsn)
	}
	if err == nil {
		err = s.retireOthers(ctx, slices.Collect(maps.Keys(cps)))
	}
	if err == nil {
		err = s.finishRecovery(ctx, rp)
	}
	if err != nil {
		return nil, fmt.Errorf("treebeard: moving an earlier build's journal to a log per machine: %w", err)
	}
	return s, nil
}

// upgradeCutShort is a machine an upgrade cut short checkpointed:
// machine 0 holds its state, so its own checkpoint and records (the
// plans moved) are passed over.
type upgradeCutShort struct{}

func (upgradeCutShort) Restore([]byte) error      { return nil }
func (upgradeCutShort) Apply([]byte) error        { return nil }
func (upgradeCutShort) Snapshot() ([]byte, error) { return nil, nil }

// reshard moves the store's blocks to n Stash shards (a store reopened
// with another number of them), once recovered: the whole store's state
// goes to machine 0's checkpoint first, so that a crash before the move
// ends is recovered from it as an earlier build's journal is
// (reopenEarlier); then each shard's machine is checkpointed with the
// blocks that hash to it, and machine 0 and the shards the store no
// longer has are retired.
func (s *store) reshard(ctx context.Context, env kv.Env, n int) (*store, error) {
	st := s.encodeState()
	err := s.log.Machine(legacyMachine).Checkpoint(ctx, encodeGob(st), s.log.Last())
	o := s.opts
	o.StashShards = n
	var ns *store
	if err == nil {
		ns, err = build(env, o, s.log)
	}
	if err == nil {
		err = ns.restore(st)
	}
	if err == nil {
		err = ns.checkpointAll(ctx, st.Initialised)
	}
	if err == nil {
		err = ns.retireOthers(ctx, append(s.machines(), legacyMachine))
	}
	if err != nil {
		return nil, fmt.Errorf("treebeard: moving the blocks to %d Stash shards: %w", n, err)
	}
	return ns, nil
}

// machines returns the store's machines.
func (s *store) machines() []durable.MachineID {
	var ids []durable.MachineID
	for i := range s.stashes {
		ids = append(ids, stashMachineID(i))
	}
	for t := range s.workers {
		ids = append(ids, treeMachineID(t))
	}
	return ids
}

// retireOthers retires each machine of ids the store does not have, once
// every one it has is checkpointed.
func (s *store) retireOthers(ctx context.Context, ids []durable.MachineID) error {
	mine := s.machines()
	for _, id := range ids {
		if !slices.Contains(mine, id) {
			if err := s.log.Machine(id).Retire(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// reopening is the durable.Machine of a store an earlier build
// journaled as machine 0 (reopenEarlier). The layout its trees were
// written with is in its checkpoint, so Restore builds the layers
// (layoutOf). Apply replays a record into the layers (replayer).
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
	if err := decodeGob(b, &st); err != nil {
		return fmt.Errorf("%w: decoding the checkpoint: %v", kv.ErrTampered, err)
	}
	var made *TreeSnapshot
	if len(st.Trees) > 0 {
		made = &st.Trees[0]
	}
	opts, err := layoutOf(r.env, r.given, r.opts, made, len(st.Trees))
	if err != nil {
		return err
	}
	s, err := build(r.env, opts, r.log)
	if err != nil {
		return err
	}
	r.s, r.rp = s, newReplayer(s, true)
	return s.restore(st)
}

// Apply implements durable.Machine: it replays a record into the layers.
func (r *reopening) Apply(rec []byte) error { return r.rp.apply(rec) }

// Snapshot implements durable.Machine; machine 0 is retired, never
// checkpointed again.
func (r *reopening) Snapshot() ([]byte, error) {
	return nil, errors.New("treebeard: an earlier build's machine 0 is not checkpointed")
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
	if err := s.install(ShardBlocks{Pos: st.Pos, Stash: st.Stash, Names: st.Names}); err != nil {
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
		shards[i] = ShardBlocks{Pos: map[tree.BlockID]Position{}, Stash: map[tree.BlockID][]byte{}, Names: map[tree.BlockID]string{}}
	}
	for id, p := range all.Pos {
		shards[shardOf(id, len(s.stashes))].Pos[id] = p
	}
	for id, v := range all.Stash {
		shards[shardOf(id, len(s.stashes))].Stash[id] = v
	}
	for id, name := range all.Names {
		shards[shardOf(id, len(s.stashes))].Names[id] = name
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

// StoredKeys implements kv.KeyLister from the names each Stash shard
// keeps beside its position map (AdminNames), read between two of its
// steps. A key an earlier build stored has no name: then it names none
// (kv.ErrKeysUnnamed).
func (s *store) StoredKeys(context.Context) ([]string, error) {
	var keys []string
	for _, a := range s.shardAdmins {
		rep := s.admin(a, AdminMsg{Op: AdminNames})
		if rep.Code != CodeOK {
			return nil, rep.Err()
		}
		named, err := tree.NamedKeys(rep.Blocks.Pos, rep.Blocks.Names)
		if err != nil {
			return nil, err
		}
		keys = append(keys, named...)
	}
	return keys, nil
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
