package pathoram

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// The obliviousness audits: pathoram's backend calls must look the same
// whatever the workload. Five workloads of auditOps accesses each run on
// stores with the adversary's view logged:
//
//   - hot: one key, read and overwritten over and over;
//   - uniform: reads and overwrites of keys drawn uniformly from 512;
//   - mix: gets of missing keys, puts of new keys, deletes of existing and
//     of missing keys, in turn;
//   - missing: gets and deletes of one key that never exists;
//   - spread: every other access a put of one of 500 new keys, each put
//     three times, 1,000 accesses apart; the others gets of keys never
//     stored.
//
// On each log, three checks (each workload's own) and one across them:
//
//   - shape (exact): every access is one Read of the L+1 buckets of a
//     root-to-leaf path, then one Write of the same addresses, every
//     bucket of one size;
//   - uniform leaves: the leaves read, in 64 equal bins, pass a chi-square
//     test of uniformity at audit.Significance;
//   - same path: consecutive accesses read the same path no more often
//     than random leaves do (audit.SamePath): a block is remapped at
//     every access, and a missing key reads a fresh random path;
//   - equal shapes (exact, across workloads): the sequence of operations
//     and sizes is identical in the five logs.
//
// Then each key is followed across its accesses (audit.FollowKey, in
// followBins bins of leaves): the leaves storage saw each key's accesses
// read, which access was which key's from the store's trace
// (TestingKnobs.Trace; audit.RealReadWalks matches it to storage's reads,
// and any disagreement fails the trace check). Sec. IV-A step 1 moves the
// block to a fresh random leaf at every access, so one key's leaves are
// uniform, each independent of the one before, rarely the one before,
// and never a function of it. The checks above see a leaf derived from
// the key only where keys are read there often (the hot key; uniform,
// about six reads of each of 512 keys), not where they are read there
// twice among other reads (spread); and a leaf derived from the previous
// one by a permutation of the leaves nowhere.
const (
	auditOps   = 3000 // at 1024 leaves, about 47 reads per bin
	auditBins  = 64
	followBins = 8 // 64 cells of the pair table: about 45 pairs each on the hot key
)

type workload struct {
	name  string
	setup func(f *fixture)
	op    func(f *fixture, r *rand.Rand, i int) error
}

var workloads = []workload{
	{"hot", func(f *fixture) { f.put("hot", "v") }, func(f *fixture, _ *rand.Rand, i int) error {
		if i%2 == 0 {
			_, _, err := f.s.Get(f.t.Context(), "hot")
			return err
		}
		return f.s.Put(f.t.Context(), "hot", []byte(fmt.Sprint(i)))
	}},
	{"uniform", preload512, func(f *fixture, r *rand.Rand, i int) error {
		k := fmt.Sprint("k", r.IntN(512))
		if i%2 == 0 {
			_, _, err := f.s.Get(f.t.Context(), k)
			return err
		}
		return f.s.Put(f.t.Context(), k, []byte(fmt.Sprint(i)))
	}},
	{"mix", preload512, func(f *fixture, r *rand.Rand, i int) error {
		ctx := f.t.Context()
		switch i % 4 {
		case 0:
			_, _, err := f.s.Get(ctx, fmt.Sprint("missing", i))
			return err
		case 1:
			return f.s.Put(ctx, fmt.Sprint("new", i), []byte("v"))
		case 2:
			return f.s.Delete(ctx, fmt.Sprint("new", i-1))
		}
		return f.s.Delete(ctx, fmt.Sprint("missing", i))
	}},
	{"missing", preload512, func(f *fixture, _ *rand.Rand, i int) error {
		if i%2 == 0 {
			_, _, err := f.s.Get(f.t.Context(), "absent")
			return err
		}
		return f.s.Delete(f.t.Context(), "absent")
	}},
	{"spread", func(*fixture) {}, func(f *fixture, _ *rand.Rand, i int) error {
		if i%2 == 0 {
			_, _, err := f.s.Get(f.t.Context(), fmt.Sprint("never", i))
			return err
		}
		return f.s.Put(f.t.Context(), fmt.Sprint("s", i/2%500), []byte(fmt.Sprint(i)))
	}},
}

func preload512(f *fixture) {
	for i := range 512 {
		f.put(fmt.Sprint("k", i), "v")
	}
}

// auditParams is one parameter set the audits run at.
type auditParams struct {
	name     string
	capacity int
	opts     Options
}

var (
	defaultParams = auditParams{"default", 1024, Options{}}
	otherParams   = auditParams{"Z=2", 2000, Options{Z: 2}} // 2048 leaves
)

// auditRun is one workload's log and its checks.
type auditRun struct {
	shape  []string // operation and sizes of every call
	reads  []audit.PathRead
	checks map[string]audit.Check
	// overlapped counts the write-backs storage saw after the next
	// access's path read: reads made with a write-back in flight.
	overlapped int
}

// Check names.
const (
	checkShape   = "shape"
	checkUniform = "uniform leaves"
	checkSame    = "same path"
	checkTrace   = "trace agrees"
)

// followChecks are audit.FollowKey's checks, in its order.
var followChecks = []string{audit.FollowUniform, audit.FollowIndependent, audit.FollowSamePosition, audit.FollowSameSuccessor}

// allChecks are the checks of runAudit.
var allChecks = append([]string{checkShape, checkUniform, checkSame, checkTrace}, followChecks...)

// runAudit runs workload w at parameters p, with leak injected, and
// checks its log.
func runAudit(t *testing.T, p auditParams, w workload, lk leak, seed byte) auditRun {
	t.Helper()
	var traced []audit.TracedRead
	q := newQueueSignal()
	opts := p.opts
	opts.TestingKnobs = TestingKnobs{Seed: &[32]byte{seed}, Leak: lk, Queued: q.hook, Trace: func(leaf uint64, id tree.BlockID) {
		traced = append(traced, audit.TracedRead{Leaf: leaf, Block: string(id[:]), Real: true})
	}}
	f := unopenedFixture(t, p.capacity, 32, opts)
	f.keys = kvtest.SeededKeys(t, seed) // reproducible block IDs, and so leaves derived from them
	f.cfg.NoFsync = true                // storage sees the same calls; thousands of fsyncs would only slow the audit
	var j *durabletest.HeldSyncs
	watched := func(cfg *kv.Config) {
		cfg.OpenJournal = func(keys *seal.Keys) (kv.Journal, error) {
			raw, err := journal.Open(f.journal, keys, journal.Options{NoSync: true})
			j = durabletest.NewHeldSyncs(raw)
			return j, err
		}
	}
	f.s = f.open(watched)
	w.setup(f)
	// The run starts at a checkpoint: one comes every so many accesses
	// since the last, and the set-ups differ in length (shapeOf).
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	f.s = f.open(watched)
	f.log.Reset()
	traced = nil
	r := rand.New(rand.NewPCG(uint64(seed), 9))
	syncs := flushes(j)
	if err := q.inOrder(0, auditOps, func(i int) error { return w.op(f, r, i) }); err != nil {
		t.Fatalf("%s: %v", w.name, err)
	}
	checkPlannedAhead(t, w.name, flushes(j)-syncs)
	run := checkAccesses(f, w, f.log.Records())
	walks, disagree := audit.RealReadWalks(traced, run.reads)
	run.checks[checkTrace] = audit.Exact(w.name+": the trace's path reads are storage's", disagree)
	for i, c := range audit.FollowKey(w.name, walks, int(f.geometry().Leaves()), followBins) {
		run.checks[followChecks[i]] = c
	}
	return run
}

// flushes returns how many times the journal under j wrote its pending
// records: the fsyncs it would have made.
func flushes(j *durabletest.HeldSyncs) int64 {
	return int64(j.Journal.(*journal.Journal).Stats().Groups)
}

// checkPlannedAhead requires that the path read of an audit's accesses,
// each queued behind the one before (queueSignal.inOrder), was journaled
// with a write-back before it: one journal Sync per access, not two
// (the first's read, and each checkpoint, take one more), so storage's
// view is checked with the overlap on. syncs counts the journal's
// writes (flushes): one covers every record appended before it, however
// many callers asked for it.
func checkPlannedAhead(t *testing.T, workload string, syncs int64) {
	t.Helper()
	t.Logf("%s: %d journal flushes in %d accesses", workload, syncs, auditOps)
	if syncs > auditOps+auditOps/100 {
		t.Errorf("%s: %d journal flushes in %d accesses; want one an access, every read but the first planned ahead in the Sync of a write-back before it", workload, syncs, auditOps)
	}
}

// checkAccesses runs the audit's checks on recs, the log of workload w.
func checkAccesses(f *fixture, w workload, recs []observe.Record) auditRun {
	g := f.geometry()
	reads, violations := pathAccesses(g, tree.Layout{Prefix: treePrefix}, f.bucketSize(), recs)
	leaves := make([]uint64, len(reads))
	for i, r := range reads {
		leaves[i] = r.Leaf
	}
	return auditRun{shape: shapeOf(recs), reads: reads, overlapped: overlapped(recs), checks: map[string]audit.Check{
		checkShape:   audit.Exact(w.name+": one read and one write of a path per access", violations),
		checkUniform: audit.Uniform(w.name+": leaves read", audit.Bin(leaves, g.Leaves(), auditBins)),
		checkSame:    audit.SamePath(w.name+": consecutive reads of one path", reads, g.Leaves()),
	}}
}

// checkpointNow checkpoints s in a turn of its own.
func (s *store) checkpointNow(ctx context.Context) error {
	s.turns.exclusive()
	defer s.turns.done()
	return s.checkpoint(ctx)
}

// overlapped counts the Writes that follow a Read of other addresses:
// the write-backs issued after the next access's read.
func overlapped(recs []observe.Record) int {
	n := 0
	for i := 1; i < len(recs); i++ {
		if recs[i].Op == observe.OpWrite && recs[i-1].Op == observe.OpRead && !slices.Equal(recs[i].Addrs, recs[i-1].Addrs) {
			n++
		}
	}
	return n
}

// runRecoveredAudit is runAudit with the store killed halfway through the
// workload (its journal writes nothing more) and recovered from its
// journal with other random choices, the workload going on with the
// recovered store. It returns the checks of the accesses before and after
// the recovery as one run, and what was wrong with storage's view of the
// recovery itself: any call but the anchor's and the journal's redone
// Writes (durabletest.CheckRecoveryView), or a Write storage never saw before.
func runRecoveredAudit(t *testing.T, p auditParams, w workload, lk leak, seed byte) (auditRun, error) {
	t.Helper()
	wit := durabletest.NewWitness(mem.New())
	f := &fixture{t: t, keys: kvtest.NewKeys(t), log: &observe.MemoryLog{}, journal: t.TempDir(),
		cfg: kv.Config{Protocol: "pathoram", Capacity: p.capacity, ValueSize: 32}}
	storage := observe.NewTap(wit, f.log)
	var j *journal.Journal
	var watched *durabletest.HeldSyncs
	q := newQueueSignal()
	open := func(fresh bool, seed byte) {
		var err error
		if j, err = journal.Open(f.journal, f.keys, journal.Options{NoSync: true}); err != nil {
			t.Fatal(err)
		}
		watched = durabletest.NewHeldSyncs(j)
		opts := p.opts
		opts.TestingKnobs = TestingKnobs{Seed: &[32]byte{seed}, Leak: lk, Queued: q.hook}
		f.cfg.Options = opts
		if f.s, err = open(t.Context(), kv.Env{Backend: storage, Keys: f.keys, Capacity: p.capacity,
			ValueSize: f.cfg.ValueSize, Fresh: fresh, Journal: watched, Options: opts}); err != nil {
			j.Crash()
			t.Fatal(err)
		}
	}
	open(true, seed)
	w.setup(f)
	if err := f.s.(*store).checkpointNow(t.Context()); err != nil { // the run starts at one, as runAudit's
		t.Fatal(err)
	}
	f.log.Reset()
	r := rand.New(rand.NewPCG(uint64(seed), 9))
	op := func(i int) error { return w.op(f, r, i) }
	syncs := flushes(watched)
	if err := q.inOrder(0, auditOps/2, op); err != nil {
		t.Fatalf("%s: %v", w.name, err)
	}
	syncs = flushes(watched) - syncs
	j.Crash()
	from := f.log.LastSeq() + 1
	wit.Recovering(true)
	open(false, seed+100)
	wit.Recovering(false)
	to := f.log.LastSeq()
	syncs -= flushes(watched)
	if err := q.inOrder(auditOps/2, auditOps, op); err != nil {
		t.Fatalf("%s: %v", w.name, err)
	}
	checkPlannedAhead(t, w.name, syncs+flushes(watched))
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	recs := f.log.Records()
	var recovery []observe.Record
	recs = slices.DeleteFunc(recs, func(r observe.Record) bool {
		if r.Seq >= from && r.Seq <= to {
			recovery = append(recovery, r)
			return true
		}
		return false
	})
	viewErr := durabletest.CheckRecoveryView(recovery)
	if n := wit.Novel(); n != 0 {
		viewErr = errors.Join(viewErr, fmt.Errorf("recovery: %d Writes storage had not seen before the crash", n))
	}
	return checkAccesses(f, w, recs), viewErr
}

// shapeOf is what the adversary sees of each call but the addresses,
// leaving out the checkpoints' anchor writes. Checkpoints come every so
// many accesses since the last (store.due), and the access before one
// writes back before the next reads, so the runs compared start at one.
func shapeOf(recs []observe.Record) []string {
	var out []string
	for _, r := range recs {
		if !durable.IsAnchorWrite(r) {
			out = append(out, fmt.Sprint(r.Op, r.Sizes))
		}
	}
	return out
}

// TestObliviousAudit runs the four workloads at the default parameters
// and at Z=2 with 2048 leaves; every check passes on each.
func TestObliviousAudit(t *testing.T) {
	for _, p := range []auditParams{defaultParams, otherParams} {
		t.Run(p.name, func(t *testing.T) {
			var shapes [][]string
			for wi, w := range workloads {
				run := runAudit(t, p, w, noLeak, byte(wi+1))
				if run.overlapped < auditOps*9/10 {
					t.Errorf("%s: %d of %d accesses read with the write-back before in flight; want nine in ten at least, each queued behind the one before", w.name, run.overlapped, auditOps)
				}
				for _, name := range allChecks {
					c := run.checks[name]
					t.Log(c)
					if !c.Pass() {
						t.Error(c)
					}
				}
				shapes = append(shapes, run.shape)
			}
			var differ []string
			for i := 1; i < len(shapes); i++ {
				if !slices.Equal(shapes[i], shapes[0]) {
					differ = append(differ, workloads[i].name+"'s calls differ in shape from "+workloads[0].name+"'s")
				}
			}
			if c := audit.Exact("equal shapes in every workload", differ); !c.Pass() {
				t.Error(c)
			}
		})
	}
}

// TestRecoveredAudit kills the store halfway through each workload and
// recovers it from its journal: storage sees only the anchor and the
// Writes it saw before the crash, and every check passes on the run
// across the recovery.
func TestRecoveredAudit(t *testing.T) {
	for wi, w := range workloads {
		t.Run(w.name, func(t *testing.T) {
			run, recovery := runRecoveredAudit(t, defaultParams, w, noLeak, byte(wi+1))
			if recovery != nil {
				t.Error(recovery)
			}
			for _, name := range []string{checkShape, checkUniform, checkSame} {
				if c := run.checks[name]; !c.Pass() {
					t.Error(c)
				}
			}
		})
	}
}

// TestRecoveryAuditCatchesLeak: a recovery that reads the path of every
// block, to check the journal against storage, shows storage the position
// map; the check of storage's view of the recovery fails on it.
func TestRecoveryAuditCatchesLeak(t *testing.T) {
	_, recovery := runRecoveredAudit(t, defaultParams, workloads[1], leakRecoveryChecksPositions, 1)
	t.Log(recovery)
	if recovery == nil || !strings.Contains(recovery.Error(), "is a read") {
		t.Fatalf("a recovery reading the position map's paths gave %v; want the recovery check to report a read", recovery)
	}
}

// leakCases are the leaks injected into pathoram, each with the workload
// that exposes it, the check that must fail on it and the checks it
// escapes there: those that pass, for whom the failing check is needed.
var leakCases = []struct {
	name     string
	leak     leak
	workload string
	check    string
	escapes  []string
}{
	{"get keeps leaf", leakGetKeepsLeaf, "hot", checkSame, nil},
	{"missing key's leaf from its ID", leakMissingKeyedLeaf, "missing", checkSame, nil},
	{"unchanged buckets not written", leakUnchangedNotWritten, "uniform", checkShape, nil},
	{"buckets in flight not read", leakInflightNotRead, "uniform", checkShape, nil},
	{"remap to a leaf from the key", leakKeyedRemap, "spread", audit.FollowSamePosition, []string{checkShape, checkUniform, checkSame}},
	{"remap to a leaf from the previous leaf", leakChainedRemap, "hot", audit.FollowSameSuccessor,
		[]string{checkShape, checkUniform, checkSame, audit.FollowUniform, audit.FollowIndependent, audit.FollowSamePosition}},
}

// TestAuditsCatchLeaks injects each leak of leakCases at the default
// parameters and requires its check to fail decisively (an exact
// violation, or a p-value below audit.DecisiveP), and the checks it
// escapes to pass.
func TestAuditsCatchLeaks(t *testing.T) {
	for _, lc := range leakCases {
		t.Run(lc.name, func(t *testing.T) {
			i := slices.IndexFunc(workloads, func(w workload) bool { return w.name == lc.workload })
			run := runAudit(t, defaultParams, workloads[i], lc.leak, 1)
			c := run.checks[lc.check]
			t.Log(c)
			if !c.Decisive() {
				t.Fatalf("leak %q: %v; want a decisive failure", lc.name, c)
			}
			for _, name := range lc.escapes {
				if e := run.checks[name]; !e.Pass() {
					t.Errorf("leak %q fails %v, which leakCases says it escapes", lc.name, e)
				} else {
					t.Logf("escapes %v", e)
				}
			}
		})
	}
}

// Tampering with the tree alone (the saved state intact) is detected on
// access: a flipped bit, or a deleted bucket, gives ErrTampered.
func TestTamperedTree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(f *fixture, addrs map[string][]byte)
	}{
		{"flipped bit", func(f *fixture, addrs map[string][]byte) {
			var items []backend.Item
			for a, v := range addrs {
				v[len(v)/2] ^= 4
				items = append(items, backend.Item{Addr: a, Value: v})
			}
			if err := f.mem.Write(f.t.Context(), items); err != nil {
				f.t.Fatal(err)
			}
		}},
		{"deleted", func(f *fixture, addrs map[string][]byte) {
			var del []string
			for a := range addrs {
				del = append(del, a)
			}
			if err := f.mem.Delete(f.t.Context(), del); err != nil {
				f.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 16, 16, Options{})
			f.put("a", "v")
			if err := f.s.Close(); err != nil {
				t.Fatal(err)
			}
			tc.tamper(f, readAll(t, f.mem, treePrefix))
			f.s = f.open(nil)
			for _, k := range []string{"a", "missing"} {
				if _, _, err := f.s.Get(t.Context(), k); !errors.Is(err, kv.ErrTampered) {
					t.Errorf("Get(%q) on a tampered tree: %v; want kv.ErrTampered", k, err)
				}
			}
		})
	}
}
