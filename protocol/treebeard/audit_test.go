package treebeard_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/bench/workload"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

// The audits run six workloads of the same length and timing over the
// same auditKeys loaded keys: Zipf 0.99, uniform, one hot key, bursts (all
// of a round's requests for one key, another in every round: repeats of a
// block that is not in the stash), one missing key, and a counter (every
// request an increment, Redis's INCR, of one key made by the first). Each is
// auditRounds rounds of auditRound concurrent requests (even-numbered
// requests of a round are Gets, odd ones Puts, or Deletes for the missing
// key, so that it never exists), a round waiting for all its replies, so
// every workload gives the Router the same epochs.
const (
	auditCapacity = 1024 // 4 trees (the default) of 256 leaves: 9 levels, 511 buckets each
	auditKeys     = 1000
	auditRounds   = 60
	auditRound    = 64
	// auditBins is the number of leaf bins per tree: 16 bins of 16 leaves,
	// 64 (tree, bin) cells with the default 4 trees.
	auditBins = 16
	// missingKey is the missing workload's key: never loaded.
	missingKey = auditKeys
	// counterKey is the key every request of the counter workload
	// increments: never loaded, so its first increment makes it.
	counterKey = auditKeys + 1
)

// workloadNames are the audits' workloads; "uniform" is the one the others
// are compared with.
var workloadNames = []string{"zipf", "uniform", "hot", "bursts", "missing", "counter"}

// auditWorkloads are the key sequences of the five workloads: the key
// (0..auditKeys) of each of the auditRounds*auditRound requests, drawn
// with fixed seeds.
func auditWorkloads(t *testing.T) map[string][]uint64 {
	n := auditRounds * auditRound
	z, err := workload.NewScrambledZipfian(auditKeys, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	zipf, uniform, hot, bursts, missing := make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
	zc := z.Worker(0, rand.New(rand.NewPCG(1, 1)))
	ur := rand.New(rand.NewPCG(2, 2))
	for i := range n {
		zipf[i], uniform[i], hot[i], missing[i] = zc.Next(), ur.Uint64N(auditKeys), 17, missingKey
		bursts[i] = uint64(i/auditRound*37) % auditKeys
	}
	counter := slices.Repeat([]uint64{counterKey}, n)
	return map[string][]uint64{"zipf": zipf, "uniform": uniform, "hot": hot, "bursts": bursts, "missing": missing, "counter": counter}
}

func auditKey(i uint64) string { return fmt.Sprintf("key-%04d", i) }

// traceLog collects trace events; events of one tree keep the order its
// worker emitted them.
type traceLog struct {
	mu     sync.Mutex
	events []treebeard.TraceEvent
	offset uint64 // added to the epochs of the events added
}

func (l *traceLog) add(e treebeard.TraceEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.offset > 0 {
		e.Epoch += l.offset
		e.Epochs = slices.Clone(e.Epochs)
		for i := range e.Epochs {
			e.Epochs[i] += l.offset
		}
	}
	l.events = append(l.events, e)
}

// renumber makes the epochs of the events added from now on follow those
// added so far: a recovered store numbers its epochs from 0 again.
func (l *traceLog) renumber() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.Kind == treebeard.TraceEpoch {
			l.offset = max(l.offset, e.Epoch+1)
		}
	}
}

func (l *traceLog) reset() {
	l.mu.Lock()
	l.events = nil
	l.mu.Unlock()
}

func (l *traceLog) get() []treebeard.TraceEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// auditRun is what one workload left: storage's view (the Tap log, from
// the end of the bulk load to the end of Close) and the trusted layers'
// trace.
type auditRun struct {
	opts     treebeard.Options // with the defaults filled in
	geo      tree.Geometry
	cached   int // top levels of each tree held in memory
	requests int
	records  []observe.Record
	events   []treebeard.TraceEvent
	stats    kv.Stats
	// rounds[r] is the Tap sequence number of the last call before round
	// r's epoch ended: round r's path reads are the calls after it and,
	// but for the last round, up to rounds[r+1].
	rounds []uint64
	// recovery is what durabletest.CheckRecoveryView and the Witness found wrong in
	// storage's view of a recovery, if the run had one.
	recovery error
	crashes  int // recoveries in the run
}

// runAudit opens a seeded, traced store over a tapped memory backend,
// loads auditKeys keys, forgets the log and trace of the load, then
// issues keys as auditRounds rounds of auditRound concurrent requests,
// and closes the store (so every eviction owed has run and is logged).
// The Routers' epochs are off the clock: each round is one epoch, ended
// once it holds all the round's requests, so every workload gives the
// layers the same epochs however loaded the machine is.
func runAudit(t *testing.T, opts treebeard.Options, seed byte, keys []uint64) auditRun {
	return runAuditCrashing(t, opts, seed, keys, 0)
}

// runAuditCrashing is runAudit with the store journaled and, when
// crashAt > 0, crashed once its first crashAt rounds are answered and
// their evictions done (its journal writes nothing more and it is wound
// down) and recovered from
// its journal with other random choices, the rounds going on with the
// recovered store. Storage's view of the recovery is checked
// (durabletest.CheckRecoveryView) and left out of the run's records, so the audits see
// the tree operations before and after it as one run.
func runAuditCrashing(t *testing.T, opts treebeard.Options, seed byte, keys []uint64, crashAt int) auditRun {
	t.Helper()
	ctx := t.Context()
	log, tr := &observe.MemoryLog{}, &traceLog{}
	master := make([]byte, seal.MasterKeySize)
	master[0] = seed
	sk, err := seal.NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	m := mem.New()
	w := durabletest.NewWitness(m)
	storage, dir := observe.NewTap(w, log), t.TempDir()
	// The epochs run on a fake clock: each round's requests are one epoch.
	epoch := opts.EnsureDefaults(auditCapacity).Epoch
	open := func(fresh bool, seed byte) (kv.Store, *clockwork.FakeClock, *journal.Journal) {
		j, err := journal.Open(dir, sk, journal.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		o, clock := opts, clockwork.NewFakeClock()
		o.TestingKnobs.Seed, o.TestingKnobs.Trace, o.TestingKnobs.Clock = &[32]byte{seed}, tr.add, clock
		s, err := treebeard.OpenRaw(ctx, kv.Env{Backend: storage, Keys: sk, Capacity: auditCapacity, ValueSize: 32,
			Fresh: fresh, Journal: j, Options: o})
		if err != nil {
			j.Crash()
			t.Fatal(err)
		}
		return s, clock, j
	}
	s, clock, j := open(true, seed)
	defer func() {
		if s != nil {
			s.Close()
			j.Close()
		}
	}()
	l, _ := kv.AsLoader(s)
	if n, err := l.Load(ctx, func(yield func(string, []byte) bool) {
		for i := range uint64(auditKeys) {
			if !yield(auditKey(i), []byte("v")) {
				return
			}
		}
	}); err != nil || n != auditKeys {
		t.Fatalf("Load = %d, %v", n, err)
	}
	// The load wrote every bucket of every tree afresh: the audits start
	// from there (every bucket unread, every eviction counter at 0).
	log.Reset()
	tr.reset()
	var rounds []uint64
	var recovery []observe.Record
	for r := range auditRounds {
		if r == crashAt && r > 0 {
			treebeard.Quiesce(s) // the evictions the last round owes
			j.Crash()
			s.Close()
			from := len(log.Records())
			m.Reopen()
			tr.renumber()
			w.Recovering(true)
			s, clock, j = open(false, seed+100)
			w.Recovering(false)
			recovery = log.Records()[from:]
		}
		var wg sync.WaitGroup
		for j := range auditRound {
			i := keys[r*auditRound+j]
			k := auditKey(i)
			wg.Go(func() {
				var err error
				switch {
				case i == counterKey:
					_, err = kv.Update(ctx, s, k, kv.Mutation{Op: kv.MutIncrBy, Arg: []byte("1")})
				case j%2 == 0:
					_, _, err = s.Get(ctx, k)
				case i == missingKey:
					err = s.Delete(ctx, k)
				default:
					err = s.Put(ctx, k, []byte{byte(r), byte(j)})
				}
				if err != nil {
					t.Error(err)
				}
			})
		}
		kvtest.WaitFor(t, "the round's requests", func() bool { return kvtest.Stat(t, s.Stats(), "epoch_requests") == auditRound })
		rounds = append(rounds, log.LastSeq())
		clock.Advance(epoch)
		wg.Wait()
	}
	run := auditRun{stats: s.Stats(), requests: auditRounds * auditRound, rounds: rounds}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	s = nil
	run.records, run.events = log.Records(), tr.get()
	if crashAt > 0 {
		run.crashes = 1
		run.recovery = checkRecoveryView(recovery, log.Records(), opts.EnsureDefaults(auditCapacity).Trees)
		if n := w.Novel(); n != 0 {
			run.recovery = errors.Join(run.recovery, fmt.Errorf("%d Writes storage had not seen before the crash", n))
		}
		run.records = slices.DeleteFunc(run.records, func(r observe.Record) bool {
			return len(recovery) > 0 && r.Seq >= recovery[0].Seq && r.Seq <= recovery[len(recovery)-1].Seq
		})
	}
	run.opts = opts.EnsureDefaults(auditCapacity)
	run.geo = tree.Geometry{L: int(kvtest.Stat(t, run.stats, "tree_levels")) - 1}
	run.cached = int(kvtest.Stat(t, run.stats, "cached_levels"))
	if got := int(kvtest.Stat(t, run.stats, "trees")); got != run.opts.Trees {
		t.Fatalf("store has %d trees, audit expects %d", got, run.opts.Trees)
	}
	return run
}

// checkRecoveryView is durabletest.CheckRecoveryView for a store whose
// trees journal their operations and not their Writes: besides the
// journal's Writes it allows Reads of tree metadata records that storage
// saw written before the recovery (all of records up to it), with which
// recovery finds whether the trees' last Writes landed
// (ringoram.Driver.Landed).
func checkRecoveryView(recovery, all []observe.Record, trees int) error {
	if len(recovery) == 0 {
		return durabletest.CheckRecoveryView(recovery)
	}
	written := map[string]bool{}
	for _, r := range all {
		if r.Seq >= recovery[0].Seq {
			break
		}
		if r.Op == observe.OpWrite {
			for _, a := range r.Addrs {
				written[a] = true
			}
		}
	}
	isMeta := func(a string) bool {
		for t := range trees {
			if _, ok := (ringoram.Layout{Prefix: treebeard.TreePrefix(t)}).ParseMeta(a); ok {
				return written[a]
			}
		}
		return false
	}
	rest := slices.DeleteFunc(slices.Clone(recovery), func(r observe.Record) bool {
		return r.Op == observe.OpRead && len(r.Addrs) > 0 && !slices.ContainsFunc(r.Addrs, func(a string) bool { return !isMeta(a) })
	})
	return durabletest.CheckRecoveryView(rest)
}

// ---- Storage's view, parsed by view.go and package ringoram -----

// treeEvents returns each tree's read and evict events, in order.
func treeEvents(events []treebeard.TraceEvent, trees int) [][]treebeard.TraceEvent {
	out := make([][]treebeard.TraceEvent, trees)
	for _, e := range events {
		if e.Kind == treebeard.TraceRead || e.Kind == treebeard.TraceEvict {
			out[e.Tree] = append(out[e.Tree], e)
		}
	}
	return out
}

// ---- The checkers: each returns the first violation it finds ----------

// checkEpochs is audit (a): every epoch a Router forwarded was read with
// exactly one path read per request, no path read belongs to an epoch
// never forwarded, and the path reads add up to the requests issued.
func checkEpochs(events []treebeard.TraceEvent, requests int) error {
	forwarded, read := map[uint64]int{}, map[uint64]int{}
	total, paths := 0, 0
	for _, e := range events {
		switch e.Kind {
		case treebeard.TraceEpoch:
			if _, dup := forwarded[e.Epoch]; dup {
				return fmt.Errorf("epoch %d forwarded twice", e.Epoch)
			}
			forwarded[e.Epoch] = e.Requests
			total += e.Requests
		case treebeard.TraceRead:
			if len(e.Epochs) != len(e.Leaves) {
				return fmt.Errorf("tree %d: a read of %d paths with %d epochs", e.Tree, len(e.Leaves), len(e.Epochs))
			}
			for _, ep := range e.Epochs {
				read[ep]++
			}
			paths += len(e.Epochs)
		}
	}
	for ep, n := range forwarded {
		if read[ep] != n {
			return fmt.Errorf("epoch %d: %d requests forwarded, %d paths read", ep, n, read[ep])
		}
	}
	for ep, n := range read {
		if _, ok := forwarded[ep]; !ok {
			return fmt.Errorf("epoch %d: %d paths read, never forwarded", ep, n)
		}
	}
	if total != requests || paths != requests {
		return fmt.Errorf("%d requests issued, %d forwarded, %d paths read", requests, total, paths)
	}
	return nil
}

// checkSchedule: every tree evicts k paths after every a of its path
// reads, right after the multi-path read that completes them; several
// owed at once are one eviction of their paths together.
func checkSchedule(perTree [][]treebeard.TraceEvent, a, k int) error {
	for t, evs := range perTree {
		reads, owed := 0, 0
		for i, e := range evs {
			switch e.Kind {
			case treebeard.TraceRead:
				if owed > 0 {
					return fmt.Errorf("tree %d, event %d: a read while %d evictions are owed", t, i, owed)
				}
				before := reads
				reads += len(e.Leaves)
				owed = reads/a - before/a
			case treebeard.TraceEvict:
				if len(e.Leaves) != owed*k {
					return fmt.Errorf("tree %d, event %d: an eviction of %d paths, %d owed (%d evictions of %d)",
						t, i, len(e.Leaves), owed*k, owed, k)
				}
				owed = 0
			}
		}
		// The last read may owe an eviction that failed; none does here.
		if owed > 0 {
			return fmt.Errorf("tree %d: %d evictions owed at the end", t, owed)
		}
	}
	return nil
}

// checkView is audit (b) for one tree: its operations, as storage saw
// them, are its trace events in order. A multi-path read of leaves P
// reads the metadata of exactly Union(P), then exactly min(c, Z) slots of
// every bucket of Union(P), c being the number of paths of P crossing it
// (one slot per bucket with Z = 1), and nothing else, then (for early
// reshuffles) Z slots of each of some buckets of the union, and writes
// the metadata of every bucket of the union and every slot of the
// reshuffled buckets, nothing else. An eviction of leaves P reads the
// metadata of Union(P), Z slots of each of its buckets, and writes every
// slot and the metadata of each. A multi-path read that evicts (the next
// trace event is the eviction) is both in one operation: its metadata
// Read and Write cover both unions, its eviction's slot Read follows its
// own, and its Write holds every slot of the eviction's buckets too.
// Unions are of the buckets below the cached levels.
func checkView(geo tree.Geometry, cached, z, s int, ops []ringoram.Op, evs []treebeard.TraceEvent, metaReads int) error {
	readMeta := map[uint64]int{} // per bucket: metadata Reads so far
	stored := func(leaves []uint64) []uint64 { return treebeard.Stored(geo, cached, geo.Union(leaves, nil)) }
	e := 0
	for _, op := range ops {
		if e >= len(evs) {
			return fmt.Errorf("call %d: %d trace events, and more operations on storage", op.Seq, len(evs))
		}
		ev := evs[e]
		e++
		want := ringoram.OpPathRead
		if ev.Kind == treebeard.TraceEvict {
			want = ringoram.OpEviction
		}
		if op.Kind != want {
			return fmt.Errorf("call %d: storage saw a %v, the trace a %v", op.Seq, op.Kind, want)
		}
		union := stored(ev.Leaves)
		var evict []uint64
		if len(op.EvictUnion) > 0 {
			if e >= len(evs) || evs[e].Kind != treebeard.TraceEvict {
				return fmt.Errorf("call %d: a multi-path read that evicts, and no eviction after it in the trace", op.Seq)
			}
			evict = stored(evs[e].Leaves)
			e++
			if err := ringoram.SlotsPerBucket("eviction slot Read", op.EvictReads, evict, func(uint64) int { return z }); err != nil {
				return fmt.Errorf("call %d: %w", op.Seq, err)
			}
		}
		if err := checkOp(geo, z, s, op, ev.Leaves, union, evict, readMeta, metaReads); err != nil {
			return fmt.Errorf("call %d (%v of %d paths): %w", op.Seq, op.Kind, len(ev.Leaves), err)
		}
	}
	if e != len(evs) {
		return fmt.Errorf("%d trace events, %d of them on storage", len(evs), e)
	}
	return nil
}

// checkOp checks one operation of checkView: a multi-path read or an
// eviction of leaves (union: their buckets), with evict the buckets of
// the eviction a multi-path read makes too.
func checkOp(geo tree.Geometry, z, s int, op ringoram.Op, leaves, union, evict []uint64, readMeta map[uint64]int, metaReads int) error {
	whole := slices.Compact(slices.Sorted(slices.Values(slices.Concat(union, evict))))
	if err := metaFrom(op.Meta, whole, readMeta, metaReads); err != nil {
		return err
	}
	perBucket := crossing(geo, leaves, z) // a path read: one slot per path, at most Z
	if op.Kind == ringoram.OpEviction {
		perBucket = func(uint64) int { return z } // ReadBucket: Z slots of each
	}
	if err := ringoram.SlotsPerBucket("slot Read", op.SlotReads[0], union, perBucket); err != nil {
		return err
	}
	if err := ringoram.SameBuckets("metadata Write", op.WroteMeta, whole); err != nil {
		return err
	}
	rewritten := union // an eviction rewrites the whole union
	if op.Kind == ringoram.OpPathRead {
		rewritten = nil
		if len(op.SlotReads) == 2 {
			for _, r := range op.SlotReads[1] {
				rewritten = append(rewritten, r.Bucket)
			}
			slices.Sort(rewritten)
			rewritten = slices.Compact(rewritten)
			if err := ringoram.SlotsPerBucket("reshuffle Read", op.SlotReads[1], rewritten, func(uint64) int { return z }); err != nil {
				return err
			}
			if !subset(rewritten, union) || slices.ContainsFunc(rewritten, func(b uint64) bool { return subset([]uint64{b}, evict) }) {
				return fmt.Errorf("a reshuffle Read outside the union, or of a bucket the eviction rewrites")
			}
		}
		rewritten = slices.Compact(slices.Sorted(slices.Values(slices.Concat(rewritten, evict))))
	}
	if len(op.WroteSlots) != len(rewritten) {
		return fmt.Errorf("Write holds slots of %d buckets, want %d", len(op.WroteSlots), len(rewritten))
	}
	all := uint64(1)<<(z+s) - 1
	for _, b := range rewritten {
		if op.WroteSlots[b] != all {
			return fmt.Errorf("Write holds slots %b of bucket %d, want all %d", op.WroteSlots[b], b, z+s)
		}
	}
	return nil
}

// metaFrom checks a metadata Read: buckets of the union only, each once,
// and no bucket's metadata read more than most times in the run (once, or
// once more after each recovery: a tree reads only what it has no copy of).
func metaFrom(meta, union []uint64, reads map[uint64]int, most int) error {
	for i, b := range meta {
		if _, ok := slices.BinarySearch(union, b); !ok || i > 0 && meta[i-1] >= b {
			return fmt.Errorf("metadata Read of bucket %d, outside the union or out of order", b)
		}
		if reads[b]++; reads[b] > most {
			return fmt.Errorf("metadata of bucket %d read %d times, at most %d", b, reads[b], most)
		}
	}
	return nil
}

// crossing returns, per bucket, how many slots a multi-path read of leaves
// takes from it: one per path crossing it, at most z.
func crossing(geo tree.Geometry, leaves []uint64, z int) func(bucket uint64) int {
	c := map[uint64]int{}
	for _, leaf := range leaves {
		for _, b := range geo.Path(leaf, nil) {
			c[b] = min(c[b]+1, z)
		}
	}
	return func(b uint64) int { return c[b] }
}

func subset(a, b []uint64) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
}

// audited is one workload's run with storage's view parsed and checked
// by audits (a), (b), (d) and (e).
type audited struct {
	auditRun
	ops   [][]ringoram.Op
	cells []int
}

// checkRun parses storage's view of run and runs the checkers of audits
// (a), (b), (d) and (e) on it. The run comes back parsed even when a
// checker fails (only an unparsable log leaves it without operations).
func checkRun(run auditRun) (audited, error) {
	o := run.opts
	a := audited{auditRun: run}
	ops, err := treebeard.Views(run.records, o.Trees, o.Z)
	if err != nil {
		return a, fmt.Errorf("audit (b): %w", err)
	}
	a.ops, a.cells = ops, treebeard.LeafCells(run.geo, ops, auditBins)
	var errs []error
	if run.recovery != nil {
		errs = append(errs, fmt.Errorf("recovery: %w", run.recovery))
	}
	if err := checkEpochs(run.events, run.requests); err != nil {
		errs = append(errs, fmt.Errorf("audit (a): %w", err))
	}
	evs := treeEvents(run.events, o.Trees)
	if err := checkSchedule(evs, o.A, o.K); err != nil {
		errs = append(errs, fmt.Errorf("eviction schedule: %w", err))
	}
	if err := treebeard.SlotSizes(run.records, o.Trees); err != nil {
		errs = append(errs, fmt.Errorf("audit (b): %w", err))
	}
	for t := range o.Trees {
		if err := checkView(run.geo, run.cached, o.Z, o.S, ops[t], evs[t], 1+run.crashes); err != nil {
			errs = append(errs, fmt.Errorf("audit (b), tree %d: %w", t, err))
		}
		if err := treebeard.EvictionOrder(run.geo, run.cached, o.K, ops[t], evictionSizes(evs[t])); err != nil {
			errs = append(errs, fmt.Errorf("audit (d), tree %d: %w", t, err))
		}
		if err := treebeard.Reshuffles(o.Z, o.S, ops[t]); err != nil {
			errs = append(errs, fmt.Errorf("audit (e), tree %d: %w", t, err))
		}
	}
	return a, errors.Join(errs...)
}

// countOps returns the number of multi-path reads, evictions and
// reshuffled buckets storage saw.
func countOps(perTree [][]ringoram.Op) (reads, evictions, reshuffles int) {
	for _, ops := range perTree {
		for _, op := range ops {
			evict, evicts := op.Eviction()
			if evicts {
				evictions++
			}
			if op.Kind == ringoram.OpPathRead {
				reads++
				reshuffles += len(op.WroteSlots) - len(evict)
			}
		}
	}
	return
}

// evictionCount is audit (g) (treebeard.EvictionCount), with the
// paths of each eviction from the trace; audit (d) checks them against
// storage.
func evictionCount(name string, a audited) audit.Check {
	paths := 0
	for _, e := range a.events {
		if e.Kind == treebeard.TraceEvict {
			paths += len(e.Leaves)
		}
	}
	return treebeard.EvictionCount(name, paths, a.requests, a.opts.Trees, a.opts.A, a.opts.K)
}

// statChecks are audits (c), (f), (g), (h), (i), (j), (k) and (l) on the
// runs of workloadNames (those present):
//
//	(c) the trees and the (tree, leaf bin) cells read are uniform, over
//	    the trees and over the trees*auditBins cells;
//	(f) the cells of every two workloads are homogeneous (two-sample
//	    test);
//	(g) evictionCount;
//	(h) the number of distinct paths per multi-path read has one
//	    distribution in every workload and in the uniform one (two-sample
//	    test over its histogram): a repeat of a block being read that
//	    read the block's real path again would shrink the unions under
//	    repeated keys;
//	(i) the slot offsets path reads fetch are uniform over the Z+S
//	    slots of a bucket;
//	(j) one multi-path read per tree and epoch (treebeard.ReadsPerEpoch);
//	(k) under a hot key, uniform keys and Zipf, one key's block followed
//	    across its real path reads (followChecks): its positions uniform,
//	    each independent of the one before, and the same position again
//	    no more often than chance (Treebeard Sec. 3's random tree and
//	    random path invariants: every access moves the block to a fresh
//	    random tree and leaf). A hot key's block, changed in every epoch,
//	    never leaves the stash (an eviction takes no block whose latest
//	    change is not journaled yet), so storage sees its position once,
//	    at its first real read, and the hot key's checks have next to
//	    nothing to test while the protocol keeps it there;
//	(l) every slot a path read takes is uniform among the slots of its
//	    bucket not read since the bucket was last written
//	    (ringoram.Choices, from storage's view alone: Ring ORAM's
//	    permuted buckets and random dummies).
//
// Every statistical check rejects at audit.Significance.
func statChecks(runs map[string]audited) []audit.Check {
	var out []audit.Check
	var names []string
	for _, n := range workloadNames {
		if _, ok := runs[n]; ok {
			names = append(names, n)
		}
	}
	for _, n := range names {
		a := runs[n]
		slots := a.opts.Z + a.opts.S
		out = append(out,
			audit.Uniform(n+": trees read", audit.SumRows(a.cells, a.opts.Trees)),
			audit.Uniform(n+": (tree, leaf bin) cells read", a.cells),
			evictionCount(n, a),
			audit.Uniform(n+": slot offsets of path reads", treebeard.SlotOffsets(a.ops, slots)),
			treebeard.ReadsPerEpoch(n, a.ops, a.rounds),
			audit.Choices(n+": slots path reads take, among their buckets' unread ones", ringoram.Choices(a.ops, slots), slots),
			treebeard.SameLeaf(n+": paths of one multi-path read on one leaf", a.geo, a.opts.Z, a.ops))
		if n == "hot" || n == "uniform" || n == "zipf" {
			out = append(out, followChecks(n, a)...)
		}
	}
	for i, x := range names {
		for _, y := range names[i+1:] {
			out = append(out, audit.Homogeneous(x+" against "+y+": (tree, leaf bin) cells read", runs[x].cells, runs[y].cells))
		}
		if u, ok := runs["uniform"]; ok && x != "uniform" {
			out = append(out, audit.Homogeneous(x+" against uniform: distinct paths per multi-path read",
				treebeard.DistinctLeaves(runs[x].geo, runs[x].ops).Counts, treebeard.DistinctLeaves(u.geo, u.ops).Counts))
		}
	}
	return out
}

// followChecks is audit (k) on a run: audit.FollowKey on keyWalks, over
// the trees*leaves positions numbered tree by tree, in followBins bins.
func followChecks(name string, a audited) []audit.Check {
	walks, err := keyWalks(a)
	if err != nil {
		return []audit.Check{audit.Exact(name+": one key followed", []string{err.Error()})}
	}
	positions := a.opts.Trees * int(a.geo.Leaves())
	return audit.FollowKey(name, walks, positions, followBins(walks, positions))
}

// realRead is one real path read as storage saw it: the Tap sequence
// number of its multi-path read, the block it fetched (from the trace)
// and its position.
type realRead struct {
	seq   uint64
	block tree.BlockID
	pos   int
}

// keyWalks follows every block through a run (audit.FollowKey): the
// positions of each block's real path reads, in Tap order, numbered tree
// by tree (tree*leaves + leaf). The trace says which path of a
// multi-path read was which block's real read (tree t's i-th traced read
// is its i-th multi-path read on storage, audit (b)); the position is the
// tree storage saw read and the leaf bucket of that path, which storage
// saw the multi-path read take a slot of. Fake reads and accesses
// answered from the stash show storage nothing of the block's position
// and are left out, so consecutive positions of a walk are those of one
// block's consecutive real reads, between which it was moved at least
// once.
func keyWalks(a audited) ([][]int, error) {
	var reads []realRead
	for t, evs := range treeEvents(a.events, a.opts.Trees) {
		var ops []ringoram.Op
		for _, op := range a.ops[t] {
			if op.Kind == ringoram.OpPathRead {
				ops = append(ops, op)
			}
		}
		evs = slices.DeleteFunc(evs, func(e treebeard.TraceEvent) bool { return e.Kind != treebeard.TraceRead })
		if len(ops) != len(evs) {
			return nil, fmt.Errorf("tree %d: %d multi-path reads on storage, %d traced", t, len(ops), len(evs))
		}
		for i, e := range evs {
			for j, id := range e.Wants {
				if id == (tree.BlockID{}) {
					continue
				}
				leaf := e.Leaves[j]
				if _, ok := slices.BinarySearch(ops[i].Union, a.geo.BucketAt(leaf, a.geo.L)); !ok {
					return nil, fmt.Errorf("call %d: tree %d's real read of leaf %d, whose leaf bucket storage did not see read", ops[i].Seq, t, leaf)
				}
				reads = append(reads, realRead{seq: ops[i].Seq, block: id, pos: t*int(a.geo.Leaves()) + int(leaf)})
			}
		}
	}
	slices.SortStableFunc(reads, func(x, y realRead) int { return cmp.Compare(x.seq, y.seq) })
	walk := map[tree.BlockID]int{}
	var walks [][]int
	for _, r := range reads {
		i, ok := walk[r.block]
		if !ok {
			i = len(walks)
			walk[r.block] = i
			walks = append(walks, nil)
		}
		walks[i] = append(walks[i], r.pos)
	}
	return walks, nil
}

// followBins is the number of position bins audit.FollowKey uses on
// walks over positions positions: the most, a power of two, at which the
// bins x bins table of consecutive positions expects at least 5 pairs a
// cell (the chi-square approximation's rule), and at least 2. Trees and
// leaves are powers of two, so with positions numbered tree by tree a
// bin holds a range of leaves of one tree, or whole trees, and a block
// kept in its tree shows in the table.
func followBins(walks [][]int, positions int) int {
	pairs := 0
	for _, w := range walks {
		pairs += max(len(w)-1, 0)
	}
	bins := 2
	for bins*2 <= positions && pairs >= 5*(bins*2)*(bins*2) {
		bins *= 2
	}
	return bins
}

// auditAll runs the named workloads with opts and seed, crashed and
// recovered after crashAt rounds when crashAt > 0 (runAuditCrashing),
// fails t on any violation of the exact audits (a), (b), (d) and (e), and
// returns the runs.
func auditAll(t *testing.T, opts treebeard.Options, seed byte, crashAt int, names ...string) map[string]audited {
	t.Helper()
	loads := auditWorkloads(t)
	runs := map[string]audited{}
	for _, name := range names {
		a, err := checkRun(runAuditCrashing(t, opts, seed, loads[name], crashAt))
		if err != nil {
			t.Fatalf("%s (seed %d): %v", name, seed, err)
		}
		reads, evictions, reshuffles := countOps(a.ops)
		t.Logf("%s (seed %d): %d requests, %d multi-path reads, %d evictions, %d reshuffled buckets, fake reads %v",
			name, seed, a.requests, reads, evictions, reshuffles, kvtest.Stat(t, a.stats, "fake_reads"))
		runs[name] = a
	}
	return runs
}

// TestObliviousAudit runs the four workloads at the default parameters
// and, in BusyEvictions, with tiny eviction parameters (A=3, k=5: a
// multi-path read of a tree then owes several evictions at once, which
// run as one eviction of a multiple of k paths, and the
// reverse-lexicographic counter wraps around the 256 leaves many times).
// On each:
//
//	(a) one path read per forwarded request, epoch by epoch (trace), and
//	    evictions of k paths after every A path reads of a tree;
//	(b) storage saw exactly the traced multi-path reads and evictions:
//	    the metadata of the union of the paths, one slot per bucket of it,
//	    reshuffle and write sets as ringoram documents them, and every
//	    slot and every metadata record of one size;
//	(d) evictions follow the reverse-lexicographic order, continuing
//	    from one eviction to the next;
//	(e) buckets are reshuffled exactly after S reads, never later, and no
//	    slot is read twice between two rewrites of its bucket;
//
// and every check of statChecks passes. In Recovered, at the defaults
// again, each workload's store is crashed halfway and recovered from its
// journal (runAuditCrashing): the recovery shows storage only Writes it
// saw before, Reads of metadata records it saw written (which of the
// trees' Writes landed) and the anchors, and the run across it passes every audit
// (the eviction order and the reshuffle counts carry on where they were).
// In Lossy, at the defaults, the layers talk over a FaultNet that loses,
// copies, delays and reorders their messages and delivers copies late
// (lossy): every audit passes as it does over a perfect transport.
//
// The defaults run every workload. The other cases, which vary how the
// store runs (its parameters, a crash, the transport), run every workload
// with TREEBEARD_SOAK=1; in the default test run they run uniform and the
// workloads that expose the leaks of leakCases and OBLIVKV_LEAK (bursts
// and missing, both nearly all fake reads where uniform's are mostly
// real), but for the costliest: BusyEvictions, whose every path read owes
// an eviction, runs uniform alone (what it adds is the eviction schedule,
// checked per run), and Lossy, whose net gob-encodes, delays and resends
// every message, uniform and missing. The cases run one at a time:
// pebble's Open (the journals) races with itself.
func TestObliviousAudit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      treebeard.Options
		crashAt   int
		workloads []string
	}{
		{"default", treebeard.Options{}, 0, workloadNames},
		{"PaperParameters", paperOptions, 0, variantWorkloads("bursts", "missing")},
		{"BusyEvictions", treebeard.Options{A: 3, K: 5}, 0, variantWorkloads()},
		{"Recovered", treebeard.Options{}, auditRounds / 2, variantWorkloads("bursts", "missing")},
		{"Lossy", treebeard.Options{TestingKnobs: treebeard.TestingKnobs{Transport: treebeard.NewFaultNet(lossy, 5)}}, 0, variantWorkloads("missing")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := auditAll(t, tc.opts, 11, tc.crashAt, tc.workloads...)
			for _, c := range statChecks(runs) {
				t.Log(c)
				if !c.Pass() {
					t.Error(c)
				}
			}
			exercised(t, tc.opts, runs)
			if net, ok := tc.opts.TestingKnobs.Transport.(*treebeard.FaultNet); ok {
				net.Settle()
				if ns := net.Stats(); ns.DroppedRequests == 0 || ns.DroppedReplies == 0 || ns.Duplicated == 0 || ns.Reordered == 0 || ns.Late == 0 {
					t.Errorf("the net did not inject every fault: %+v", ns)
				}
			}
		})
	}
}

// variantWorkloads are the workloads of TestObliviousAudit's cases other
// than the defaults: uniform, the one the others are compared with, and
// others; every workload with TREEBEARD_SOAK=1.
func variantWorkloads(others ...string) []string {
	if os.Getenv(soakEnv) != "" {
		return workloadNames
	}
	return append([]string{"uniform"}, others...)
}

// exercised fails t if the runs did not exercise what audits (d) and (e)
// check: evictions and early reshuffles at the default A (with the
// default or the paper's bucket shape); at tiny eviction
// parameters (where evictions rewrite the upper buckets so often that
// early reshuffles are rare or absent), evictions of several k at once
// and the eviction counter wrapping around the leaves.
func exercised(t *testing.T, opts treebeard.Options, runs map[string]audited) {
	t.Helper()
	for name, a := range runs {
		_, evictions, reshuffles := countOps(a.ops)
		if opts.A == 0 || opts.A >= treebeard.DefaultA {
			if evictions == 0 || reshuffles == 0 {
				t.Errorf("%s: %d evictions and %d reshuffled buckets: the audit saw too little", name, evictions, reshuffles)
			}
			continue
		}
		multiple, paths := 0, 0
		for _, e := range a.events {
			if e.Kind == treebeard.TraceEvict && e.Tree == 0 {
				paths += len(e.Leaves)
				if len(e.Leaves) > opts.K {
					multiple++
				}
			}
		}
		if multiple == 0 || uint64(paths) < 2*a.geo.Leaves() {
			t.Errorf("%s: tree 0 evicted %d paths, %d evictions of several k at once: the audit saw too little", name, paths, multiple)
		}
	}
}

// leakCases are the leaks injected into treebeard, each with the
// workloads that expose it and the check (by name, from statChecks) that
// must fail on it. The leaks injected into the Ring ORAM trees (a real
// block's slot, a dummy's) are ringoram's TestSlotOffsets: ringoram lets
// treebeard inject one only in builds with the oblivkv_leaks tag
// (leakDummiesInOrder).
var leakCases = []struct {
	name      string
	leak      treebeard.Leak
	workloads []string
	check     string
}{
	{"repeat reads its real path", treebeard.LeakRepeatReadsRealPath, []string{"bursts", "uniform"}, "bursts against uniform: distinct paths per multi-path read"},
	{"missing key's position from its ID", treebeard.LeakMissingKeyedPosition, []string{"missing", "uniform"}, "missing against uniform: distinct paths per multi-path read"},
	{"eviction counts real reads only", treebeard.LeakEvictOnRealReads, []string{"hot"}, "hot: k paths evicted per A path reads"},
	{"shard parts read as they arrive", treebeard.LeakEagerShardParts, []string{"uniform"}, "uniform: one multi-path read per tree and epoch"},
	{"moved to a position from its ID", treebeard.LeakKeyedRemap, []string{"uniform"}, "uniform: consecutive positions of one key independent"},
	{"moved within its tree", treebeard.LeakRemapKeepsTree, []string{"uniform"}, "uniform: consecutive positions of one key independent"},
}

// paperOptions are the paper's parameters where the defaults differ
// (Sec. 5.3.1: Z=1; Sec. 7: S=6, k=200).
var paperOptions = treebeard.PaperOptions()

// TestAuditsCatchLeaks injects each leak of leakCases at the default
// parameters and at the paper's, and requires its check to fail
// decisively (an exact violation, or a p-value below audit.DecisiveP).
func TestAuditsCatchLeaks(t *testing.T) {
	for _, lc := range leakCases {
		for name, base := range map[string]treebeard.Options{"default": {}, "paper": paperOptions} {
			t.Run(lc.name+"/"+name, func(t *testing.T) { catchLeak(t, base, lc.leak, lc.workloads, lc.check) })
		}
	}
}

// TestSameLeafCatchesRepeat injects a repeat that reads its block's real
// path into the default parameters and requires the same-leaf check to
// fail decisively on bursts of one key. It needs Z > 1, so it does not run
// at the paper's Z = 1, where a leaf bucket gives one slot however many
// paths end there.
func TestSameLeafCatchesRepeat(t *testing.T) {
	catchLeak(t, treebeard.Options{}, treebeard.LeakRepeatReadsRealPath, []string{"bursts"}, "bursts: paths of one multi-path read on one leaf")
}

// catchLeak runs the workloads with leak injected into base and requires
// check to fail decisively.
func catchLeak(t *testing.T, base treebeard.Options, leak treebeard.Leak, workloads []string, check string) {
	opts := base
	opts.TestingKnobs.Leak = leak
	runs := map[string]audited{}
	loads := auditWorkloads(t)
	for _, w := range workloads {
		// The exact audits may fail too (a leak can break the trace's
		// schedule); the check named is the one required.
		a, _ := checkRun(runAudit(t, opts, 11, loads[w]))
		runs[w] = a
	}
	i := slices.IndexFunc(statChecks(runs), func(c audit.Check) bool { return c.Name == check })
	if i < 0 {
		t.Fatalf("no check named %q", check)
	}
	c := statChecks(runs)[i]
	t.Log(c)
	if !c.Decisive() {
		t.Fatalf("%v; want a decisive failure", c)
	}
}

// TestRecoveryAuditCatchesLeaks injects leaks into recovery and requires
// the audit across a crash (TestObliviousAudit's Recovered) to fail on
// each: recovery restarting the eviction order breaks audit (d), and
// recovery reading the paths of the position map's blocks shows up in
// storage's view of the recovery.
func TestRecoveryAuditCatchesLeaks(t *testing.T) {
	for _, lc := range []struct {
		name string
		leak treebeard.Leak
		want string
	}{
		{"forgets evictions", treebeard.LeakRecoveryForgetsEvictions, "audit (d)"},
		{"checks positions", treebeard.LeakRecoveryChecksPositions, "recovery: "},
	} {
		t.Run(lc.name, func(t *testing.T) {
			opts := treebeard.Options{TestingKnobs: treebeard.TestingKnobs{Leak: lc.leak}}
			_, err := checkRun(runAuditCrashing(t, opts, 11, auditWorkloads(t)["uniform"], auditRounds/2))
			if err == nil || !strings.Contains(err.Error(), lc.want) {
				t.Fatalf("leak %q: %v; want a failure of %s", lc.name, err, lc.want)
			}
			t.Log(err)
		})
	}
}

// ---- The audits can fail ----------------------------------------------

// cloneRecords deep-copies records, so a test can doctor them.
func cloneRecords(records []observe.Record) []observe.Record {
	out := make([]observe.Record, len(records))
	for i, r := range records {
		r.Addrs, r.Sizes = slices.Clone(r.Addrs), slices.Clone(r.Sizes)
		out[i] = r
	}
	return out
}

// cloneEvents deep-copies events.
func cloneEvents(events []treebeard.TraceEvent) []treebeard.TraceEvent {
	out := make([]treebeard.TraceEvent, len(events))
	for i, e := range events {
		e.Leaves, e.Epochs, e.Wants = slices.Clone(e.Leaves), slices.Clone(e.Epochs), slices.Clone(e.Wants)
		out[i] = e
	}
	return out
}

// opGroups returns the indices in records of each operation of tree t:
// its Reads and the Write that ends them.
func opGroups(records []observe.Record, t int) [][]int {
	p := treebeard.TreePrefix(t)
	var out [][]int
	var cur []int
	for i, r := range records {
		if len(r.Addrs) == 0 || !strings.HasPrefix(r.Addrs[0], p) {
			continue
		}
		cur = append(cur, i)
		if r.Op == observe.OpWrite {
			out = append(out, cur)
			cur = nil
		}
	}
	return out
}

// evictionSizes returns the number of paths of each traced eviction.
func evictionSizes(evs []treebeard.TraceEvent) []int {
	var ks []int
	for _, e := range evs {
		if e.Kind == treebeard.TraceEvict {
			ks = append(ks, len(e.Leaves))
		}
	}
	return ks
}

// TestAuditCatchesViolations doctors the log and the trace of a clean run
// the way a broken implementation would have produced them, and expects
// each checker to report it.
func TestAuditCatchesViolations(t *testing.T) {
	run := runAudit(t, treebeard.Options{}, 31, auditWorkloads(t)["uniform"])
	clean, err := checkRun(run)
	if err != nil {
		t.Fatalf("the clean run fails the audit: %v", err)
	}
	o, geo := run.opts, run.geo
	l := ringoram.Layout{Prefix: treebeard.TreePrefix(0)}
	groups := opGroups(run.records, 0)
	var evictions, plain, reshuffling [][]int // tree 0's operations by shape
	for i, g := range groups {
		_, evicts := clean.ops[0][i].Eviction()
		switch op := clean.ops[0][i]; {
		case evicts:
			if len(evictions) == 0 || len(g) == len(evictions[0]) { // swapped record by record
				evictions = append(evictions, g)
			}
		case len(op.SlotReads) == 1:
			plain = append(plain, g)
		default:
			reshuffling = append(reshuffling, g)
		}
	}
	if len(evictions) < 3 || len(plain) == 0 || len(reshuffling) == 0 {
		t.Fatalf("tree 0: %d evictions, %d plain reads, %d reads with reshuffles: too few to doctor", len(evictions), len(plain), len(reshuffling))
	}
	tree0 := func(records []observe.Record) []ringoram.Op {
		ops, err := treebeard.Views(records, o.Trees, o.Z)
		if err != nil {
			t.Fatalf("doctored log does not parse: %v", err)
		}
		return ops[0]
	}
	evs := treeEvents(run.events, o.Trees)
	expect := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("the checker saw nothing wrong")
		}
		t.Logf("reported: %v", err)
	}

	t.Run("a/a path read missing", func(t *testing.T) {
		events := cloneEvents(run.events)
		for i, e := range events {
			if e.Kind == treebeard.TraceRead && len(e.Leaves) > 1 {
				events[i].Leaves, events[i].Epochs = e.Leaves[1:], e.Epochs[1:]
				break
			}
		}
		expect(t, checkEpochs(events, run.requests))
	})
	t.Run("a/one request more than paths", func(t *testing.T) {
		events := cloneEvents(run.events)
		for i, e := range events {
			if e.Kind == treebeard.TraceEpoch {
				events[i].Requests++
				break
			}
		}
		expect(t, checkEpochs(events, run.requests+1))
	})
	t.Run("a/an eviction skipped", func(t *testing.T) {
		events := cloneEvents(run.events)
		for i, e := range events {
			if e.Kind == treebeard.TraceEvict {
				events = slices.Delete(events, i, i+1)
				break
			}
		}
		expect(t, checkSchedule(treeEvents(events, o.Trees), o.A, o.K))
	})
	slotRead := plain[0][len(plain[0])-2] // the first plain read's slot Read, before its Write
	t.Run("b/two slots of one bucket", func(t *testing.T) {
		records := cloneRecords(run.records)
		r := &records[slotRead]
		b, s, _ := l.ParseSlot(r.Addrs[0])
		r.Addrs = append(r.Addrs, l.SlotAddr(b, (s+1)%(o.Z+o.S)))
		r.Sizes = append(r.Sizes, r.Sizes[0])
		expect(t, checkView(geo, run.cached, o.Z, o.S, tree0(records), evs[0], 1))
	})
	t.Run("b/a bucket of the union not read", func(t *testing.T) {
		records := cloneRecords(run.records)
		r := &records[slotRead]
		r.Addrs, r.Sizes = r.Addrs[:len(r.Addrs)-1], r.Sizes[:len(r.Sizes)-1]
		expect(t, checkView(geo, run.cached, o.Z, o.S, tree0(records), evs[0], 1))
	})
	t.Run("d/evictions out of order", func(t *testing.T) {
		records := cloneRecords(run.records)
		for i := range evictions[0] {
			x, y := evictions[0][i], evictions[1][i]
			records[x].Addrs, records[y].Addrs = records[y].Addrs, records[x].Addrs
			records[x].Sizes, records[y].Sizes = records[y].Sizes, records[x].Sizes
		}
		expect(t, treebeard.EvictionOrder(geo, run.cached, o.K, tree0(records), evictionSizes(evs[0])))
	})
	t.Run("d/an eviction's paths skipped", func(t *testing.T) {
		// The first eviction never happened on storage: the second then
		// evicts paths k..2k-1 where 0..k-1 are due.
		records := cloneRecords(run.records)
		for _, i := range slices.Backward(evictions[0]) {
			records = slices.Delete(records, i, i+1)
		}
		expect(t, treebeard.EvictionOrder(geo, run.cached, o.K, tree0(records), evictionSizes(evs[0])[1:]))
	})
	t.Run("d/clean", func(t *testing.T) {
		if err := treebeard.EvictionOrder(geo, run.cached, o.K, clean.ops[0], evictionSizes(evs[0])); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("e/a reshuffle skipped", func(t *testing.T) {
		records := cloneRecords(run.records)
		w := &records[reshuffling[0][len(reshuffling[0])-1]]
		var addrs []string
		var sizes []int
		for i, a := range w.Addrs {
			if _, ok := l.ParseMeta(a); ok {
				addrs, sizes = append(addrs, a), append(sizes, w.Sizes[i])
			}
		}
		w.Addrs, w.Sizes = addrs, sizes
		expect(t, treebeard.Reshuffles(o.Z, o.S, tree0(records)))
	})
	t.Run("b/metadata read twice", func(t *testing.T) {
		records := cloneRecords(run.records)
		// The top stored bucket of the first plain read's union, and the
		// next operation whose union holds it too.
		first := slices.IndexFunc(groups, func(g []int) bool { return g[0] == plain[0][0] })
		b := clean.ops[0][first].Union[0]
		next := first + 1
		for next < len(groups) && !slices.Contains(clean.ops[0][next].Union, b) {
			next++
		}
		if next == len(groups) {
			t.Fatalf("no operation after the first plain read reads bucket %d", b)
		}
		meta := observe.Record{Op: observe.OpRead, Addrs: []string{l.MetaAddr(b)}, Sizes: []int{1}}
		at := []int{plain[0][0], groups[next][0]}
		slices.Sort(at)
		for _, i := range slices.Backward(at) {
			meta.Seq = records[i].Seq
			records = slices.Insert(records, i, meta)
		}
		expect(t, checkView(geo, run.cached, o.Z, o.S, tree0(records), evs[0], 1))
	})
	t.Run("e/a reshuffle too early", func(t *testing.T) {
		// The first plain read's Write also rewrites the top stored
		// bucket of its union, read at most S-Z times so far.
		records := cloneRecords(run.records)
		first := slices.IndexFunc(groups, func(g []int) bool { return g[0] == plain[0][0] })
		root := clean.ops[0][first].Union[0]
		w := &records[plain[0][len(plain[0])-1]]
		for s := range o.Z + o.S {
			w.Addrs, w.Sizes = append(w.Addrs, l.SlotAddr(root, s)), append(w.Sizes, 0)
		}
		expect(t, treebeard.Reshuffles(o.Z, o.S, tree0(records)))
	})
}
