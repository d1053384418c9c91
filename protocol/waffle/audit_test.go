package waffle_test

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/bench/workload"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/waffle"
)

// The alpha/beta audit (Waffle Sec. 8.3) at a modest size: N = 2048,
// B:R:f_D = 40:8:8 (f_R = 24), C = 200 = 5(B-f_D+R), and the default D =
// 683, which matches the two terms of Theorem 7.1: alpha = ceil(max(2047/24,
// 683/8)) = 86; Theorem 7.2 gives beta = 4.
const (
	auditN       = 2048
	auditBatches = 1500 // about 24 reads of every object on storage
	auditClients = 16
)

var auditOpts = waffle.Options{B: 40, R: 8, FD: 8, C: 200, Timeout: 200 * time.Microsecond}

// mode is the most frequent value of h.
func mode(h audit.Histogram) int {
	m := 0
	for v, c := range h.Counts {
		if c > h.Counts[m] {
			m = v
		}
	}
	return m
}

// alphaBucket is the width, in batches, of the buckets in which the alpha
// histograms are compared (about an eighth of alpha).
const alphaBucket = 10

// maxAlphaTV is the largest total variation distance allowed between the
// alpha histograms of the skewed and the uniform workload: the share of
// samples whose alpha would have to change to turn one into the other.
// The paper reports about 1% at N = 1M. At this size, bucket by bucket
// (width 1) the two differ far more (about 59%): the mode of alpha, the
// batches the fill queries take to cycle through the real objects, is 2-3
// batches later under uniform input, whose real queries spend reads on
// recently written objects; in buckets of alphaBucket batches they differ
// by about 5-6%.
const maxAlphaTV = 0.10

// auditRun is what one workload leaves for the analyses.
type auditRun struct {
	alpha       waffle.AlphaResult
	beta        waffle.BetaResult // real objects only (Theorem 7.2)
	dummyBeta   waffle.BetaResult
	realEvents  []waffle.Event
	dummyEvents []waffle.Event
	records     []observe.Record
	minReads    int     // fewest storage reads of any key
	readShare   float64 // share of keys read from storage at least 3 times
	opsPerSec   float64 // client requests answered per second
}

func objName(r waffle.Ref) string {
	if r.Dummy {
		return "dummy:" + hex.EncodeToString([]byte(r.Key))
	}
	return "key:" + r.Key
}

// tracer keeps the proxy's trace of every batch, turns it into the
// events of waffle.Beta, one list for real objects and one for
// dummies, and counts the storage reads of every key.
type tracer struct {
	mu              sync.Mutex
	traced          []waffle.TracedBatch
	realEv, dummyEv []waffle.Event
	readsByKey      map[string]int
	lastTS          uint64
	err             error // a jump in the batch timestamps
}

func (tr *tracer) batch(b waffle.TracedBatch) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	ts, read, written := b.TS, b.Read, b.Written
	if tr.lastTS != 0 && ts != tr.lastTS+1 && tr.err == nil {
		tr.err = fmt.Errorf("batch timestamps jump from %d to %d", tr.lastTS, ts)
	}
	tr.lastTS = ts
	tr.traced = append(tr.traced, b)
	var re, de waffle.Event
	for _, r := range read {
		if r.Dummy {
			de.Read = append(de.Read, objName(r))
		} else {
			re.Read = append(re.Read, objName(r))
			tr.readsByKey[r.Key]++
		}
	}
	for _, r := range written {
		if r.Dummy {
			de.Written = append(de.Written, objName(r))
		} else {
			re.Written = append(re.Written, objName(r))
		}
	}
	tr.realEv, tr.dummyEv = append(tr.realEv, re), append(tr.dummyEv, de)
}

func (tr *tracer) batches() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.realEv)
}

// auditWorkload is a distribution of keys, by index, that the clients of
// an audited run draw from.
type auditWorkload struct {
	name string
	next func(r *rand.Rand) uint64
}

// auditWorkloads are the skewed (Zipf 0.99) and the uniform distribution
// over n keys.
func auditWorkloads(t *testing.T, n int) []auditWorkload {
	t.Helper()
	zipf, err := workload.NewZipfian(uint64(n), 0.99)
	if err != nil {
		t.Fatal(err)
	}
	return []auditWorkload{
		{"zipf0.99", zipf.Next},
		{"uniform", func(r *rand.Rand) uint64 { return r.Uint64N(uint64(n)) }},
	}
}

// auditSetup is one audited run: a full store of n keys with options
// opts, values of valueSize bytes, and clients clients (90% gets, 10%
// puts) until batches batches ran.
type auditSetup struct {
	n, batches, clients, valueSize int
	opts                           waffle.Options
}

// defaultAudit is the setup of the audits at N = auditN.
func defaultAudit(opts waffle.Options) auditSetup {
	return auditSetup{n: auditN, batches: auditBatches, clients: auditClients, valueSize: 16, opts: opts}
}

// runAudit runs the store of setup (runStore) and analyses its tap log
// and trace.
func runAudit(t *testing.T, setup auditSetup, next func(r *rand.Rand) uint64) auditRun {
	t.Helper()
	raw := runStore(t, setup, next)
	run := analyse(t, raw.records, raw.tr, raw.keys)
	run.opsPerSec = raw.opsPerSec
	return run
}

// storeRun is what runStore records of one run.
type storeRun struct {
	keys      []string
	records   []observe.Record // the tap log, from before the store opened
	loaded    int              // records[:loaded] created and bulk-loaded the store
	tr        *tracer
	opsPerSec float64 // client requests answered per second
}

// runStore bulk-loads the store of setup, then runs its clients drawing
// keys from next, recording the tap log, the proxy's trace and the
// clients' throughput.
func runStore(t *testing.T, setup auditSetup, next func(r *rand.Rand) uint64) storeRun {
	t.Helper()
	ctx := t.Context()
	keys := make([]string, setup.n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key%07d", i)
	}
	tr := &tracer{readsByKey: map[string]int{}}
	var log observe.MemoryLog
	opts := setup.opts
	opts.TestingKnobs.Trace = tr.batch
	s, err := kv.Open(ctx, kv.Config{Protocol: "waffle", Backend: mem.New(), Keys: kvtest.NewKeys(t),
		Capacity: setup.n, ValueSize: setup.valueSize, Options: opts, TapLog: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, ok := kv.AsLoader(s)
	if !ok {
		t.Fatal("waffle has no bulk loader")
	}
	n, err := l.Load(ctx, func(yield func(string, []byte) bool) {
		for _, k := range keys {
			if !yield(k, []byte(k)) {
				return
			}
		}
	})
	if err != nil || n != setup.n {
		t.Fatalf("Load = %d, %v; want a full store of %d", n, err, setup.n)
	}
	loaded := len(log.Records())
	var wg sync.WaitGroup
	var done atomic.Int64
	start := time.Now()
	for c := range setup.clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 7))
			for tr.batches() < setup.batches {
				k := keys[next(r)]
				var err error
				if r.IntN(10) == 0 {
					err = s.Put(ctx, k, []byte(k))
				} else {
					_, _, err = s.Get(ctx, k)
				}
				if err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return storeRun{keys: keys, records: log.Records(), loaded: loaded, tr: tr,
		opsPerSec: float64(done.Load()) / time.Since(start).Seconds()}
}

// analyse runs the alpha and beta analyses on a run's tap log and trace.
func analyse(t *testing.T, records []observe.Record, tr *tracer, keys []string) auditRun {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	run := auditRun{records: records, realEvents: tr.realEv, dummyEvents: tr.dummyEv}
	var err error
	if run.alpha, err = waffle.Alpha(records); err != nil {
		t.Fatal(err)
	}
	if run.alpha.Batches != len(tr.realEv) {
		t.Fatalf("the tap log holds %d batches, the proxy traced %d", run.alpha.Batches, len(tr.realEv))
	}
	run.beta, run.dummyBeta = waffle.Beta(tr.realEv), waffle.Beta(tr.dummyEv)
	run.minReads = -1
	several := 0
	for _, k := range keys {
		c := tr.readsByKey[k]
		if c >= 3 {
			several++
		}
		if run.minReads < 0 || c < run.minReads {
			run.minReads = c
		}
	}
	run.readShare = float64(several) / float64(len(keys))
	return run
}

// TestAlphaBetaUniform checks Theorems 7.1 and 7.2 on a Zipf 0.99 and a
// uniform workload (Waffle Sec. 8.3, Table 2 and Fig. 4): alpha, from
// the tap log alone, never exceeds TheoreticalAlpha (and no id still on
// storage at the end is older); beta, from the proxy's trace of real
// objects, is never below TheoreticalBeta; and the adversary-visible alpha
// histograms of the two workloads nearly coincide.
func TestAlphaBetaUniform(t *testing.T) {
	alphaBound := int(waffle.TheoreticalAlpha(auditOpts, auditN))
	betaBound := int(waffle.TheoreticalBeta(auditOpts, auditN))
	if betaBound <= 0 {
		t.Fatalf("TheoreticalBeta = %d; the parameters should make it positive", betaBound)
	}
	runs := map[string]auditRun{}
	for _, w := range auditWorkloads(t, auditN) {
		run := runAudit(t, defaultAudit(auditOpts), w.next)
		runs[w.name] = run
		a, b := run.alpha, run.beta
		t.Logf("%s: %d batches, %d alpha samples, %.1f%% of keys read 3+ times (fewest %d: hot keys stay cached); alpha theory %d observed max %d (max unread age %d, %d unread, %d deleted unread); beta theory %d observed min %d over %d samples (%d pending; dummies' min beta %d)",
			w.name, a.Batches, len(a.Samples), 100*run.readShare, run.minReads, alphaBound, a.Max, a.MaxUnreadAge, len(a.Unread), a.DeletedUnread,
			betaBound, b.Min, len(b.Samples), b.Pending, run.dummyBeta.Min)
		if run.readShare < 0.9 {
			t.Errorf("%s: only %.1f%% of keys were read from storage 3 times or more; want 90%%", w.name, 100*run.readShare)
		}
		if a.Max > alphaBound {
			t.Errorf("%s: observed alpha %d > Theorem 7.1's %d", w.name, a.Max, alphaBound)
		}
		if a.MaxUnreadAge >= alphaBound {
			t.Errorf("%s: an id unread at the end is %d batches old, not below alpha = %d", w.name, a.MaxUnreadAge, alphaBound)
		}
		if len(b.Samples) == 0 || b.Min < betaBound {
			t.Errorf("%s: observed min beta %d (%d samples) < Theorem 7.2's %d", w.name, b.Min, len(b.Samples), betaBound)
		}
		if b.Reread != 0 {
			t.Errorf("%s: %d reads of an object read and not written since", w.name, b.Reread)
		}
	}
	zh, uh := runs["zipf0.99"].alpha.Hist, runs["uniform"].alpha.Hist
	tv1 := audit.TotalVariation(zh, uh)
	tv := audit.TotalVariation(zh.Rebin(alphaBucket), uh.Rebin(alphaBucket))
	t.Logf("alpha histograms, zipf0.99 vs uniform: total variation %.4f in buckets of %d batches (threshold %.2f; paper ~0.01 at N=1M), %.4f in buckets of 1; modal alpha %d vs %d",
		tv, alphaBucket, maxAlphaTV, tv1, mode(zh), mode(uh))
	if tv > maxAlphaTV {
		t.Errorf("alpha histograms of skewed and uniform input differ in %.2f%% of samples; want at most %.0f%%", 100*tv, 100*maxAlphaTV)
	}

	// The analyses can fail: delay one read past alpha, and write one
	// object back too early.
	t.Run("DoctoredLogFails", func(t *testing.T) {
		recs := doctorDelayedRead(t, runs["uniform"].records, alphaBound)
		a, err := waffle.Alpha(recs)
		if err != nil {
			t.Fatal(err)
		}
		if a.Max <= alphaBound {
			t.Fatalf("doctored log: max alpha %d; want it reported above %d", a.Max, alphaBound)
		}
	})
	t.Run("DoctoredEventsFail", func(t *testing.T) {
		ev := doctorEarlyWrite(t, runs["uniform"].realEvents, runs["uniform"].beta, betaBound)
		if b := waffle.Beta(ev); b.Min >= betaBound {
			t.Fatalf("doctored events: min beta %d; want it reported below %d", b.Min, betaBound)
		}
	})
}

// doctorDelayedRead returns a copy of recs in which one id read alpha or
// fewer batches after its write is read instead bound+1 batches after it.
func doctorDelayedRead(t *testing.T, recs []observe.Record, bound int) []observe.Record {
	t.Helper()
	a, err := waffle.Alpha(recs)
	if err != nil {
		t.Fatal(err)
	}
	var readRecs []int // index in recs of batch i+1's Read
	for i, r := range recs {
		if r.Op == observe.OpRead && len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], waffle.ObjectPrefix) {
			readRecs = append(readRecs, i)
		}
	}
	for _, s := range a.Samples {
		late := s.Written + bound + 1
		if late > a.Batches {
			continue
		}
		out := append([]observe.Record(nil), recs...)
		from, to := &out[readRecs[s.Read-1]], &out[readRecs[late-1]]
		var kept []string
		for _, x := range from.Addrs {
			if x != s.Addr {
				kept = append(kept, x)
			}
		}
		from.Addrs = kept
		for j := range out { // nor deleted before its new read
			if out[j].Op == observe.OpDelete && slices.Contains(out[j].Addrs, s.Addr) {
				out[j].Addrs = slices.DeleteFunc(slices.Clone(out[j].Addrs), func(x string) bool { return x == s.Addr })
			}
		}
		to.Addrs = append(append([]string(nil), to.Addrs...), s.Addr)
		return out
	}
	t.Fatal("no sample to doctor")
	return nil
}

// doctorEarlyWrite returns a copy of events in which one real object read
// in batch r is also written in batch r+bound-1, before Theorem 7.2 allows.
func doctorEarlyWrite(t *testing.T, events []waffle.Event, b waffle.BetaResult, bound int) []waffle.Event {
	t.Helper()
	if len(b.Samples) == 0 {
		t.Fatal("no beta sample to doctor")
	}
	s := b.Samples[len(b.Samples)/2]
	out := append([]waffle.Event(nil), events...)
	i := s.Read + bound - 1
	out[i].Written = append(append([]string(nil), out[i].Written...), s.Object)
	return out
}

// TestDummyAlpha checks the dummy term of Theorem 7.1 on its own, from the
// proxy's trace: with D = 100 and f_D = 8 no dummy stays on storage more
// than ceil(D/f_D) = 13 batches, across the resets of the dummies'
// timestamps every D/f_D batches (Sec. 6.2). D is not a multiple of f_D,
// so rounds straddle batches. A reset that drew a fresh random order each
// round would fail it: a dummy written early in one round could be read
// late in the next, up to about 2D/f_D batches later.
func TestDummyAlpha(t *testing.T) {
	opts := auditOpts
	opts.D = 100
	bound := int(math.Ceil(float64(opts.D) / float64(opts.FD)))
	run := runAudit(t, defaultAudit(opts), func(r *rand.Rand) uint64 { return r.Uint64N(auditN) })
	worst, samples := 0, 0
	written := map[string]int{}
	for i, ev := range run.dummyEvents {
		for _, d := range ev.Read {
			if w, ok := written[d]; ok {
				worst, samples = max(worst, i-w), samples+1
			}
		}
		for _, d := range ev.Written {
			written[d] = i
		}
	}
	t.Logf("D = %d, f_D = %d: dummy alpha max %d over %d samples; ceil(D/f_D) = %d", opts.D, opts.FD, worst, samples, bound)
	if samples < len(run.dummyEvents)*opts.FD/2 {
		t.Fatalf("only %d dummy alpha samples in %d batches", samples, len(run.dummyEvents))
	}
	if worst > bound {
		t.Errorf("a dummy stayed on storage %d batches, beyond ceil(D/f_D) = %d", worst, bound)
	}
}
