package taostore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/oblivkv/oblivkv/protocol/taostore"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The obliviousness audits: taostore's backend calls must look the same
// whatever the workload. Each workload issues auditRequests requests, half
// Gets, on a store of auditCapacity keys with the adversary's view logged:
//
//   - hot: one key, from auditClients concurrent clients, so many
//     requests repeat a request in flight (fake reads);
//   - uniform: keys spread over the whole capacity, concurrent clients;
//   - serial hot: one key, one client, every request a real read;
//   - serial missing: Gets and Deletes of a key that never exists, one
//     client;
//   - serial spread: Gets of keys never stored, and Puts of spreadKeys
//     keys, each put three times, far apart, in turn, one client.
//
// On each log, five checks:
//
//   - shape (exact): every call is a read of the stored levels of one
//     root-to-leaf path or a write of buckets, one path read per request,
//     every bucket of one size;
//   - uniform leaves: the leaves read, in auditBins equal bins, pass a
//     chi-square test of uniformity at audit.Significance;
//   - same path: path reads in flight together, or one right after the
//     other, read one path no more often than random leaves do
//     (audit.SamePath): a repeated request reads a random path, a block is
//     remapped at every access, a missing key reads a fresh random path;
//   - write-back shape (exact): every write-back lists, in ascending
//     order, exactly the stored buckets of the paths to the leaves it
//     writes;
//   - write-back schedule (exact): every K flushed paths, and nothing
//     else, make one write-back of exactly those paths
//     (taostore.WriteBackSchedule).
//
// Across workloads, the leaves read under the hot key and under uniform
// keys are one distribution (audit.Homogeneous). The Sequencer is audited
// apart, by the CURIOUS attack (TestSequencerDefeatsCURIOUS).
//
// Then each key is followed across its real reads (audit.FollowKey, in
// followBins bins of leaves): the leaves storage saw each key's real
// reads read, which read was which key's real one from the store's trace
// (taostore.Traced; only the first of concurrent requests for a block
// reads its real path, Sec. IV-B step 1, and the fake reads of the others
// are left out), matched to storage's reads by audit.RealReadWalks, any
// disagreement failing the trace check. A block answered moves to a fresh
// random leaf (Sec. IV-B step 2, ANSWER-REQUEST), so one key's real reads
// are uniform, each independent of the one before, rarely the one before,
// and never a function of it. The checks above see a leaf derived from
// the key only where the key is read there often (the hot keys), barely
// where each of half the keys is read there three times (uniform), not
// where each key is read there twice among other reads (serial spread);
// and a leaf derived from the previous one by a permutation of the leaves
// nowhere.
const (
	auditCapacity = 1024 // 2^10 leaves, 11 levels
	auditRequests = 4096 // 64 reads per bin of leaves
	auditClients  = 8
	auditBins     = 64
	followBins    = 8 // 64 cells of the pair table
	spreadKeys    = auditRequests / 6
)

// auditParams is one parameter set the audits run at.
type auditParams struct {
	name string
	opts taostore.Options
}

var (
	defaultParams = auditParams{"default", taostore.Options{}} // Z=4, K=40, no cached levels
	otherParams   = auditParams{"Z=2 K=10 cached=2", taostore.Options{Z: 2, K: 10, CachedLevels: 2}}
)

func (p auditParams) k() int { return cmp.Or(p.opts.K, taostore.DefaultK) }

// workload is a sequence of auditRequests requests from some clients;
// op(i) issues request i.
type workload struct {
	name    string
	clients int
	op      func(ctx context.Context, s kv.Store, i int) error
}

// getPut gets key(i) for even i and puts it for odd i.
func getPut(key func(i int) string) func(context.Context, kv.Store, int) error {
	return func(ctx context.Context, s kv.Store, i int) error {
		if i%2 == 0 {
			_, _, err := s.Get(ctx, key(i))
			return err
		}
		return s.Put(ctx, key(i), []byte("v"))
	}
}

var workloads = []workload{
	{"hot", auditClients, getPut(func(int) string { return "the-hot-key" })},
	{"uniform", auditClients, getPut(func(i int) string { return fmt.Sprintf("key-%d", (i*7919)%auditCapacity) })},
	{"serial hot", 1, getPut(func(int) string { return "the-hot-key" })},
	{"serial missing", 1, func(ctx context.Context, s kv.Store, i int) error {
		if i%2 == 0 {
			_, _, err := s.Get(ctx, "absent")
			return err
		}
		return s.Delete(ctx, "absent")
	}},
	{"serial spread", 1, func(ctx context.Context, s kv.Store, i int) error {
		if i%2 == 0 {
			_, _, err := s.Get(ctx, fmt.Sprint("never-", i))
			return err
		}
		return s.Put(ctx, fmt.Sprint("spread-", i/2%spreadKeys), []byte("v"))
	}},
}

func workloadNamed(name string) workload {
	return workloads[slices.IndexFunc(workloads, func(w workload) bool { return w.name == name })]
}

// run issues w's requests to s from w.clients clients and returns after
// every reply.
func (w workload) run(t *testing.T, s kv.Store) { w.runRange(t, s, 0, auditRequests) }

// runRange issues w's requests from..to-1.
func (w workload) runRange(t *testing.T, s kv.Store, from, to int) {
	t.Helper()
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range w.clients {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < to; i = int(next.Add(1)) - 1 {
				if err := w.op(t.Context(), s, i); err != nil {
					t.Errorf("%s, request %d: %v", w.name, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Check names.
const (
	checkShape    = "shape"
	checkUniform  = "uniform leaves"
	checkSame     = "same path"
	checkWBShape  = "write-back shape"
	checkSchedule = "write-back schedule"
	checkTrace    = "trace agrees"
)

// followChecks are audit.FollowKey's checks, in its order.
var followChecks = []string{audit.FollowUniform, audit.FollowIndependent, audit.FollowSamePosition, audit.FollowSameSuccessor}

var checkNames = append([]string{checkShape, checkUniform, checkSame, checkWBShape, checkSchedule, checkTrace}, followChecks...)

// auditRun is one workload's view and its checks.
type auditRun struct {
	bins                []int // leaves read, in auditBins bins
	stashMax, fakeReads float64
	checks              map[string]audit.Check
}

// runAudit runs workload w at parameters p, with leak lk injected, and
// checks the calls of the workload, the write-backs it started included.
func runAudit(t *testing.T, p auditParams, w workload, lk taostore.Leak, seed byte) auditRun {
	t.Helper()
	records, stats, traced := runLogged(t, p, w, lk, seed)
	v := taostore.ParseView(records, tree.NewGeometry(auditCapacity), p.opts.CachedLevels)
	if len(v.Reads) != auditRequests {
		v.Shape = append(v.Shape, fmt.Sprintf("%d path reads for %d requests", len(v.Reads), auditRequests))
	}
	geo := tree.NewGeometry(auditCapacity)
	leaves := make([]uint64, len(v.Reads))
	for i, r := range v.Reads {
		leaves[i] = r.Leaf
	}
	run := auditRun{bins: audit.Bin(leaves, geo.Leaves(), auditBins),
		stashMax: kvtest.Stat(t, stats, "stash_max"), fakeReads: kvtest.Stat(t, stats, "fake_reads")}
	run.checks = map[string]audit.Check{
		checkShape:    audit.Exact(w.name+": one path read per request, buckets of one size", v.Shape),
		checkUniform:  audit.Uniform(w.name+": leaves read", run.bins),
		checkSame:     audit.SamePath(w.name+": path reads in flight together or consecutive", v.Reads, geo.Leaves()),
		checkWBShape:  audit.Exact(w.name+": write-backs are whole stored paths", v.WBShape),
		checkSchedule: taostore.WriteBackSchedule(w.name+": a write-back of the paths every K path reads", v.Reads, v.WriteBacks, p.k()),
	}
	walks, disagree := audit.RealReadWalks(traced, v.Reads)
	run.checks[checkTrace] = audit.Exact(w.name+": the trace's path reads are storage's", disagree)
	for i, c := range audit.FollowKey(w.name, walks, int(geo.Leaves()), followBins) {
		run.checks[followChecks[i]] = c
	}
	return run
}

// runLogged runs workload w on a fresh store at parameters p with leak lk
// injected, closes it, and returns the workload's calls, the store's
// statistics before Close and its trace of the path reads it planned.
func runLogged(t *testing.T, p auditParams, w workload, lk taostore.Leak, seed byte) ([]observe.Record, kv.Stats, []audit.TracedRead) {
	t.Helper()
	log := &observe.MemoryLog{}
	var traced []audit.TracedRead // appended under the store's lock, read after Close
	opts := p.opts
	opts.TestingKnobs = taostore.TestingKnobs{Seed: &[32]byte{seed}, Leak: lk, Trace: func(leaf uint64, id tree.BlockID, real bool) {
		traced = append(traced, audit.TracedRead{Leaf: leaf, Block: string(id[:]), Real: real})
	}}
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "taostore", Backend: mem.New(),
		Keys: kvtest.SeededKeys(t, seed), Capacity: auditCapacity, ValueSize: 64, TapLog: log, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	log.Reset() // the initial tree write is not part of the workload
	w.run(t, s)
	stats := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return workloadCalls(t, log.Records()), stats, traced
}

// runRecovered runs workload w at parameters p with leak lk injected on a
// journaled store that is killed halfway (its journal writes nothing
// more, and it is wound down) and recovered from its journal with other
// random choices, the workload going on with the recovered store. It
// returns the workload's calls but the recovery's, and what was wrong with
// storage's view of the recovery: any call but the anchor's and Writes
// (durabletest.CheckRecoveryView), or a Write to an address storage had not
// seen before the crash (the subtree written back is made of paths
// storage saw read).
func runRecovered(t *testing.T, p auditParams, w workload, lk taostore.Leak, seed byte) ([]observe.Record, error) {
	t.Helper()
	log, m, keys, dir := &observe.MemoryLog{}, mem.New(), kvtest.NewKeys(t), t.TempDir()
	storage := observe.NewTap(m, log)
	var j *journal.Journal
	open := func(fresh bool, seed byte) kv.Store {
		var err error
		if j, err = journal.Open(dir, keys, journal.Options{NoSync: true}); err != nil {
			t.Fatal(err)
		}
		opts := p.opts
		opts.TestingKnobs = taostore.TestingKnobs{Seed: &[32]byte{seed}, Leak: lk}
		s, err := taostore.OpenRaw(t.Context(), kv.Env{Backend: storage, Keys: keys, Capacity: auditCapacity,
			ValueSize: 64, Fresh: fresh, Journal: j, Options: opts})
		if err != nil {
			j.Crash()
			t.Fatal(err)
		}
		return s
	}
	s := open(true, seed)
	log.Reset() // the initial tree write is not part of the workload
	w.runRange(t, s, 0, auditRequests/2)
	j.Crash()
	s.Close() // waits for the write-backs in flight; writes nothing more
	m.Reopen()
	before := log.Records()
	seen := map[string]bool{}
	for _, r := range before {
		for _, a := range r.Addrs {
			seen[a] = true
		}
	}
	s = open(false, seed+100)
	recovery := log.Records()[len(before):]
	w.runRange(t, s, auditRequests/2, auditRequests)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	viewErr := durabletest.CheckRecoveryView(recovery)
	for _, r := range recovery {
		if r.Op != observe.OpWrite {
			continue // the Reads are CheckRecoveryView's
		}
		for _, a := range r.Addrs {
			if !seen[a] && !durable.IsAnchorWrite(r) {
				viewErr = errors.Join(viewErr, fmt.Errorf("recovery: call %d writes %s, which storage had not seen", r.Seq, a))
				break
			}
		}
	}
	// The checkpoints' anchor writes come every durable.DefaultEvery
	// records and at Close: not the workload's.
	noAnchors := func(recs []observe.Record) []observe.Record {
		return slices.DeleteFunc(slices.Clone(recs), durable.IsAnchorWrite)
	}
	after := workloadCalls(t, noAnchors(log.Records()[len(before)+len(recovery):]))
	return append(noAnchors(before), after...), viewErr
}

// TestRecoveredAudit kills a store halfway through the hot and uniform
// workloads and recovers it from its journal: storage sees only the anchor
// and Writes of buckets it saw before, and the run across the recovery
// passes the shape, uniform leaves, same path and write-back shape checks.
// (The write-back schedule restarts at a recovery, which writes the whole
// subtree back: that a crash happened is public.)
func TestRecoveredAudit(t *testing.T) {
	for i, name := range []string{"hot", "uniform"} {
		t.Run(name, func(t *testing.T) {
			records, recovery := runRecovered(t, defaultParams, workloadNamed(name), taostore.NoLeak, byte(i+1))
			if recovery != nil {
				t.Error(recovery)
			}
			v := taostore.ParseView(records, tree.NewGeometry(auditCapacity), defaultParams.opts.CachedLevels)
			if len(v.Reads) != auditRequests {
				t.Errorf("%d path reads for %d requests", len(v.Reads), auditRequests)
			}
			geo := tree.NewGeometry(auditCapacity)
			leaves := make([]uint64, len(v.Reads))
			for i, r := range v.Reads {
				leaves[i] = r.Leaf
			}
			for _, c := range []audit.Check{
				audit.Exact(name+": one path read per request, buckets of one size", v.Shape),
				audit.Uniform(name+": leaves read", audit.Bin(leaves, geo.Leaves(), auditBins)),
				audit.SamePath(name+": path reads in flight together or consecutive", v.Reads, geo.Leaves()),
				audit.Exact(name+": write-backs are whole stored paths", v.WBShape),
			} {
				t.Log(c)
				if !c.Pass() {
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
	_, recovery := runRecovered(t, defaultParams, workloadNamed("uniform"), taostore.LeakRecoveryChecksPositions, 1)
	t.Log(recovery)
	if recovery == nil || !strings.Contains(recovery.Error(), "is a read") {
		t.Fatalf("a recovery reading the position map's paths gave %v; want the recovery check to report a read", recovery)
	}
}

// workloadCalls returns the calls of records made before the store was
// closed: Close waits for the write-backs in flight and writes the whole
// subtree back in one call, the last of the log (the stores of the audits
// keep no journal, so no checkpoint writes an anchor).
func workloadCalls(t *testing.T, records []observe.Record) []observe.Record {
	t.Helper()
	if n := len(records); n == 0 || records[n-1].Op != observe.OpWrite {
		t.Fatal("no subtree write of Close at the end of the log")
	}
	return records[:len(records)-1]
}

// TestObliviousAudit runs every workload at the default parameters and
// at Z=2, K=10 with two cached levels; every check passes on each, the
// leaves read under the hot key and under uniform keys are one
// distribution, and the stash stays small.
func TestObliviousAudit(t *testing.T) {
	for _, p := range []auditParams{defaultParams, otherParams} {
		t.Run(p.name, func(t *testing.T) {
			bins := map[string][]int{}
			for wi, w := range workloads {
				run := runAudit(t, p, w, taostore.NoLeak, byte(wi+1))
				for _, name := range checkNames {
					c := run.checks[name]
					t.Log(c)
					if !c.Pass() {
						t.Error(c)
					}
				}
				bins[w.name] = run.bins
				// The paper sees the stash stay within 2k blocks (Sec. V-C d).
				bound := 2 * p.k()
				t.Logf("%s: %v fake reads; the stash reached %v blocks (bound 2K = %d)", w.name, run.fakeReads, run.stashMax, bound)
				if run.stashMax > float64(bound) {
					t.Errorf("%s: the stash reached %v blocks; bound 2K = %d", w.name, run.stashMax, bound)
				}
			}
			c := audit.Homogeneous("hot and uniform: leaves read", bins["hot"], bins["uniform"])
			t.Log(c)
			if !c.Pass() {
				t.Error(c)
			}
		})
	}
}

// leakCases are the leaks injected into taostore, each with the audit
// that must fail on it.
var leakCases = []struct {
	name  string
	leak  taostore.Leak
	audit func(t *testing.T, lk taostore.Leak) audit.Check
}{
	{"repeat reads real path", taostore.LeakRepeatReadsRealPath, viewCheck("hot", checkSame)},
	{"get keeps leaf", taostore.LeakGetKeepsLeaf, viewCheck("serial hot", checkSame)},
	{"missing key's leaf from its ID", taostore.LeakMissingKeyedLeaf, viewCheck("serial missing", checkSame)},
	{"put writes back at once", taostore.LeakPutWritesBack, viewCheck("uniform", checkSchedule)},
	{"unchanged buckets not written", taostore.LeakUnchangedNotWritten, viewCheck("uniform", checkWBShape)},
	{"remap to a leaf from the key", taostore.LeakKeyedRemap, viewCheck("serial spread", audit.FollowSamePosition,
		checkShape, checkUniform, checkSame, checkWBShape, checkSchedule)},
	{"remap to a leaf from the previous leaf", taostore.LeakChainedRemap, viewCheck("hot", audit.FollowSameSuccessor,
		checkShape, checkUniform, checkSame, checkWBShape, checkSchedule, audit.FollowUniform, audit.FollowIndependent, audit.FollowSamePosition)},
	{"replies out of order", taostore.LeakUnorderedReplies, func(t *testing.T, lk taostore.Leak) audit.Check {
		o := defaultParams.opts
		o.TestingKnobs.Leak = lk
		return curious(t, o, "distinct")
	}},
}

// viewCheck is the audit that runs a workload at the default parameters
// and returns one check of its view. The leak must pass the checks it
// escapes: those that do not see it there, for whom check is needed.
func viewCheck(workload, check string, escapes ...string) func(*testing.T, taostore.Leak) audit.Check {
	return func(t *testing.T, lk taostore.Leak) audit.Check {
		run := runAudit(t, defaultParams, workloadNamed(workload), lk, 1)
		for _, name := range escapes {
			if c := run.checks[name]; !c.Pass() {
				t.Errorf("the leak fails %v, which it should escape", c)
			} else {
				t.Logf("escapes %v", c)
			}
		}
		return run.checks[check]
	}
}

// TestAuditsCatchLeaks injects each leak of leakCases at the default
// parameters and requires its audit to fail decisively (an exact
// violation, or a p-value below audit.DecisiveP).
func TestAuditsCatchLeaks(t *testing.T) {
	for _, lc := range leakCases {
		t.Run(lc.name, func(t *testing.T) {
			c := lc.audit(t, lc.leak)
			t.Log(c)
			if !c.Decisive() {
				t.Fatalf("leak %q: %v; want a decisive failure", lc.name, c)
			}
		})
	}
}

// gate is a backend whose path read number hold blocks until release is
// closed, like a real read held back by an asynchronous network.
type gate struct {
	backend.Backend
	hold    int64
	reads   atomic.Int64 // path reads started
	release chan struct{}
}

func (g *gate) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if len(addrs) > 1 && g.reads.Add(1) == g.hold { // not metadata or state
		<-g.release
	}
	return g.Backend.Read(ctx, addrs)
}

// curious runs the attack of Sec. II-B at options o and checks that
// replies leave in arrival order. Two keys are put (arrivals 0 and 1);
// then the real read of a Get of the first (arrival 2) is held back at the
// backend, and a second Get (arrival 3; of the same key, second ==
// "repeat", so a fake read; or of the other, "distinct", so a real read)
// has its path returned at once. Once the Processor has handled that
// path, no reply may have left but the Puts'; once the held read is let
// go, the replies must have left in arrival order. The order is taken
// where replies leave, at the Sequencer: the callers' goroutines may wake
// in any order.
func curious(t *testing.T, o taostore.Options, second string) audit.Check {
	t.Helper()
	g := &gate{Backend: mem.New(), release: make(chan struct{})}
	var released []uint64 // arrival numbers, as replies leave (under the store's lock)
	var relMu sync.Mutex
	handled := make(chan uint64, 8)
	o.TestingKnobs.Seed = &[32]byte{42}
	o.TestingKnobs.Released = func(a uint64) {
		relMu.Lock()
		released = append(released, a)
		relMu.Unlock()
	}
	o.TestingKnobs.Handled = func(a uint64) { handled <- a }
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "taostore", Backend: g, Keys: kvtest.NewKeys(t),
		Capacity: auditCapacity, ValueSize: 64, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, k := range []string{"k1", "k2"} {
		if err := s.Put(t.Context(), k, []byte(k)); err != nil {
			t.Fatal(err)
		}
		<-handled
	}
	g.hold = g.reads.Load() + 1
	open := sync.OnceFunc(func() { close(g.release) })
	defer open() // a failing check must not leave the read held
	var wg sync.WaitGroup
	get := func(key string) {
		wg.Go(func() {
			if _, _, err := s.Get(context.Background(), key); err != nil {
				t.Error(err)
			}
		})
	}
	get("k1")
	kvtest.WaitFor(t, "the first read to be held", func() bool { return g.reads.Load() >= g.hold })
	get(map[string]string{"repeat": "k1", "distinct": "k2"}[second])
	if a := <-handled; a != 3 {
		t.Fatalf("handled the path of arrival %d while arrival 2's was held back; want 3", a)
	}
	var violations []string
	relMu.Lock()
	for _, a := range released[2:] {
		violations = append(violations, fmt.Sprintf("the reply to arrival %d left while arrival 2's read was held back", a))
	}
	relMu.Unlock()
	open()
	wg.Wait()
	relMu.Lock()
	defer relMu.Unlock()
	if !slices.IsSorted(released) || len(released) != 4 {
		violations = append(violations, fmt.Sprintf("replies left in the order %v, want [0 1 2 3]", released))
	}
	c := audit.Exact(second+": replies leave in arrival order", violations)
	if len(violations) == 0 {
		c.Detail = fmt.Sprintf("replies left in the order %v", released)
	}
	return c
}

// TestSequencerDefeatsCURIOUS is the attack of Sec. II-B, with a repeated
// key and with distinct keys, at both parameter sets: replies leave in
// arrival order, whichever path returns first.
func TestSequencerDefeatsCURIOUS(t *testing.T) {
	for _, p := range []auditParams{defaultParams, otherParams} {
		for _, second := range []string{"repeat", "distinct"} {
			t.Run(p.name+"/"+second, func(t *testing.T) {
				c := curious(t, p.opts, second)
				t.Log(c)
				if !c.Pass() {
					t.Error(c)
				}
			})
		}
	}
}
