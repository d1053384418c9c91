package treebeard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/random"
	"github.com/oblivkv/oblivkv/seal"
)

func init() {
	kv.Register(kv.Protocol{
		Name:    protocolName,
		Summary: "Treebeard: Ring ORAM trees behind Routers and Stash shards, requests batched in epochs; hides which key is accessed from an active adversary (the default)",
		Open:    kv.FactoryOf(open),
		Options: Options{},
		Audit:   auditSpec,
		Reseal:  newResealer,
	})
}

// protocolName is the name Treebeard is registered under.
const protocolName = "treebeard"

// checkpointEvery is how many of a machine's journal records make its
// checkpoint due. A tree's records are small (a plan, a change, no sealed
// bucket) and come about a thousand a second under load, while each
// checkpoint stops its machine for a snapshot (a tree until it is between
// two operations; a Stash shard's takes milliseconds at 2^16 keys),
// encodes the whole state and syncs storage for the anchor's write. At
// durable's default a busy store checkpointed several machines a second
// and those checkpoints set its tail latency. Ten times as many records
// keep a tree's replay at open to seconds' worth of operations.
const checkpointEvery = 10 * durable.DefaultEvery

// treesPrefix begins every storage address of every tree.
const treesPrefix = "tb/"

// TreePrefix returns the prefix of every storage address of tree t.
func TreePrefix(t int) string { return fmt.Sprintf("%s%d/", treesPrefix, t) }

// IsMetaAddr reports whether addr is the address of a bucket's metadata in
// one of the trees.
func IsMetaAddr(addr string) bool {
	l, ok := treeLayout(addr)
	if ok {
		_, ok = l.ParseMeta(addr)
	}
	return ok
}

// SlotIndex returns the index in its bucket of the slot whose address addr
// is, and false for any other address.
func SlotIndex(addr string) (int, bool) {
	l, ok := treeLayout(addr)
	if !ok {
		return 0, false
	}
	_, slot, ok := l.ParseSlot(addr)
	return slot, ok
}

// treeLayout returns the layout of the tree whose prefix addr begins with,
// and false when it begins with no tree's.
func treeLayout(addr string) (ringoram.Layout, bool) {
	rest, ok := strings.CutPrefix(addr, treesPrefix)
	t, _, cut := strings.Cut(rest, "/")
	n, err := strconv.Atoi(t)
	if !ok || !cut || err != nil || n < 0 || TreePrefix(n) != treesPrefix+t+"/" {
		return ringoram.Layout{}, false
	}
	return ringoram.Layout{Prefix: TreePrefix(n)}, true
}

// store wires the three layers in one process: Routers in front, Stash
// shards in the middle, ORAM shards owning the trees, talking through the
// interfaces of layers.go.
type store struct {
	requests // the kv.Store calls, sent through do
	b        backend.Backend
	keys     *seal.Keys
	// Shape holds the options, the trees' geometry and the value size
	// (which bounds the values a journal record may hold).
	Shape
	quota *quota // the capacity and the keys stored

	routers []*Router
	stashes []*Stash
	workers []*treeWorker // by tree
	next    atomic.Uint64 // round-robin over routers
	log     *durable.Log  // the machines' logs are in it (logs.go)
	ckpt    *checkpoints  // the machines' checkpoints under way
	net     *netState
	// deposed is shared by the trees' storage handles (fenced): once a
	// later open of the store has taken over, none of them calls storage.
	deposed backend.Deposition

	// The store's own messages (AdminMsg): to each Stash shard, and to the
	// owner of each tree.
	shardAdmins, treeAdmins []Admin
	adminNet                *netState // never stopped: Close's checkpoint needs it
	adminSeq                atomic.Uint64

	// The trees are written lazily: a fresh store writes them on first use
	// or at a bulk load, never twice.
	initMu      sync.Mutex
	initialised atomic.Bool
}

func open(ctx context.Context, env kv.Env) (*store, error) {
	opts, err := kv.OptionsOf[Options]("treebeard", env.Options)
	if err != nil {
		return nil, err
	}
	given := opts
	sh, err := NewShape(env.Capacity, env.ValueSize, opts)
	if err != nil {
		return nil, err
	}
	opts = sh.opts
	log := durable.New(env.Journal, env.Backend, env.Keys)
	log.SetEvery(checkpointEvery)
	var s *store
	if env.Fresh {
		if s, err = build(env, opts, log); err == nil {
			if err = s.claimFences(ctx); err == nil {
				err = s.create(ctx)
			}
		}
	} else {
		s, err = reopen(ctx, env, given, opts, log)
	}
	if err != nil {
		return nil, err
	}
	s.start()
	return s, nil
}

// build creates the layers, not yet running, journaling in log.
func build(env kv.Env, opts Options, log *durable.Log) (*store, error) {
	s := &store{b: env.Backend, keys: env.Keys, Shape: shapeOf(env.Capacity, env.ValueSize, opts), net: newNetState(), adminNet: newNetState(),
		quota: &quota{capacity: int64(env.Capacity)}}
	seeds, err := newSeeds(opts)
	if err != nil {
		return nil, err
	}
	s.requests = requests{keys: env.Keys, send: s.do}
	s.log, s.ckpt = log, &checkpoints{}
	s.startIncarnation()
	net := transportOf(opts.TestingKnobs, env.Keys)
	clock := cmp.Or(opts.TestingKnobs.Clock, clockwork.NewRealClock())
	for i := range opts.StashShards {
		core := s.newStashCore(seeds())
		s.stashes = append(s.stashes, newStash(i, core, s.quota, newMachineLog(log, stashMachineID(i), s.ckpt), s.net))
	}
	sources := make([]EvictionSource, len(s.stashes))
	shards := make([]StashShard, len(s.stashes))
	for i, st := range s.stashes {
		sources[i], shards[i] = net.evictionSource(i, st), net.stash(i, st)
		s.shardAdmins = append(s.shardAdmins, net.admin(Endpoint{LayerStash, i}, st))
	}
	orams := make([]*ORAM, opts.ORAMShards)
	for i := range orams {
		orams[i] = &ORAM{workers: map[int]*treeWorker{}}
	}
	readers := make([]PathReader, opts.Trees)
	for t := range opts.Trees {
		core := s.newTreeCore()
		w := newTreeWorker(t, core, s.net, clock, cmp.Or(opts.TestingKnobs.PartTimeout, defaultPartTimeout), opts.TestingKnobs.Trace)
		w.log = newMachineLog(log, treeMachineID(t), s.ckpt)
		w.log.again = w.wakeUp
		w.superseded = func(ctx context.Context) error { return s.deposed.Superseded(ctx, env.Backend, s.fence(t)) }
		cfg := s.treeConfig(t)
		cfg.Backend, cfg.Keys, cfg.Seed = s.fenced(env.Backend, t), env.Keys, new(seeds())
		tr, err := ringoram.NewDriver(cfg)
		if err != nil {
			return nil, fmt.Errorf("treebeard: %w", err)
		}
		injectTreeLeak(opts.TestingKnobs.Leak, tr.Tree)
		w.connect(tr, sources)
		w.m.inFlight = opts.TestingKnobs.InFlight
		owner := orams[t%len(orams)]
		owner.workers[t] = w
		s.workers = append(s.workers, w)
		readers[t] = net.pathReader(t, owner)
		s.treeAdmins = append(s.treeAdmins, net.admin(Endpoint{LayerORAM, t}, owner))
	}
	for _, st := range s.stashes {
		st.connect(readers)
	}
	for i := range opts.Routers {
		s.routers = append(s.routers, newRouter(i, opts.Epoch, clock, shards, s.net, opts.TestingKnobs.Trace))
	}
	return s, nil
}

// transportOf returns what carries the layers' messages: direct calls, or
// the sealed wire under TestingKnobs.Wire or a TestingKnobs.Transport.
func transportOf(k TestingKnobs, keys *seal.Keys) transport {
	switch {
	case k.Transport != nil:
		return sealedWire{keys: keys, net: k.Transport}
	case k.Wire:
		return sealedWire{keys: keys, net: inProcess{}}
	}
	return directCall{}
}

// newSeeds returns a maker of independent seeds, all drawn from one root:
// random.Fresh, or the seed of o (tests).
func newSeeds(o Options) (func() random.Seed, error) {
	root, err := random.Root(o.TestingKnobs.Seed)
	if err != nil {
		return nil, fmt.Errorf("treebeard: %w", err)
	}
	if o.TestingKnobs.Leak == leakFixedSeed {
		root = random.Seed{}
	}
	parent := random.New(root)
	return func() random.Seed { return random.Draw(parent) }, nil
}

func (s *store) start() {
	for _, w := range s.workers {
		go w.run()
	}
}

// ensureInit writes the empty trees of a fresh store before its first
// access.
func (s *store) ensureInit(ctx context.Context) error {
	if s.initialised.Load() {
		return nil
	}
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if s.initialised.Load() {
		return nil
	}
	if err := s.initTrees(ctx, nil); err != nil {
		return err
	}
	if err := s.checkpointAll(ctx, true); err != nil {
		return err
	}
	s.initialised.Store(true)
	return nil
}

// initTrees writes every tree, placed[t] holding the blocks of tree t's
// buckets (nil: empty), as many trees at once as there are CPUs: each
// holds a batch of its buckets in memory twice (plain and sealed), and
// more at once only raise the server's peak memory.
func (s *store) initTrees(ctx context.Context, placed [][][]ringoram.Block) error {
	errs := make([]error, len(s.treeAdmins))
	var wg sync.WaitGroup
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	for t, a := range s.treeAdmins {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			var p [][]ringoram.Block
			if placed != nil {
				p = placed[t]
			}
			errs[t] = s.admin(a, AdminMsg{Op: AdminInit, Tree: t, Placed: p}).Err()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("treebeard: writing the trees: %w", err)
	}
	return nil
}

func (s *store) do(ctx context.Context, req Request) (Reply, error) {
	if err := s.ensureInit(ctx); err != nil {
		return Reply{}, err
	}
	return replyOf(s.routers[s.next.Add(1)%uint64(len(s.routers))].Do(ctx, req))
}

// Close answers every request in flight (a tree still issuing again a
// Read that storage keeps failing gives up, and its requests fail), stops
// the ORAM shards, checkpoints every machine and closes the backend.
func (s *store) Close() error {
	s.net.stop()                  // a message lost in transit is not sent again
	for _, w := range s.workers { // a tree retrying a failed Read gives up
		w.tree.Abandon()
	}
	for _, r := range s.routers {
		r.Close()
	}
	for _, w := range s.workers {
		w.stop()
	}
	err := s.checkpointAll(context.Background(), s.initialised.Load())
	return errors.Join(err, s.b.Close())
}

// Prepare implements kv.Preparer: it writes the empty trees of a fresh
// store now rather than at its first access.
func (s *store) Prepare(ctx context.Context) error { return s.ensureInit(ctx) }
