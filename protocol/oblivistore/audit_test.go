package oblivistore_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/oblivistore"
)

// The obliviousness audits: oblivistore's backend calls must look the
// same whatever the workload. Each workload issues auditRequests requests
// from auditClients concurrent clients on a loaded store of auditCapacity
// keys (32 partitions of levels 0..7), one in ten a Get of a key that
// does not exist, with the adversary's view logged and the driver issuing
// one backend call at a time in the core's order:
//
//   - hot: every other request on one key, Gets and Puts;
//   - uniform: keys spread over the whole capacity.
//
// On each log, three checks of what is read (auditLog.checks):
//
//   - slots read once (exact, oblivistore.SlotsReadOnce): no slot is read twice
//     between two writes of its level, every write writes whole levels;
//   - levels read once (exact, oblivistore.LevelsReadOnce): every request reads
//     one slot of every level of its partition that can be read, and
//     nothing else;
//   - uniform partitions: the partitions requests read pass a chi-square
//     test of uniformity at audit.Significance;
//
// and the checks of where blocks go (auditLog.positionChecks), with the
// trusted side's word (oblivistore.Trace) on which read is which key's
// and which slot is real, and one from the Tap alone.
//
// Across workloads, the partitions read under the hot key and under
// uniform keys are one distribution (audit.Homogeneous).
const (
	auditCapacity = 1024
	auditRequests = 4096
	auditClients  = 8
	auditMissing  = 10 // one request in auditMissing is for a missing key
)

type workload func(r *rand.Rand) string

var workloads = map[string]workload{
	"hot": func(r *rand.Rand) string {
		if r.IntN(2) == 0 {
			return "k0"
		}
		return fmt.Sprint("k", r.IntN(auditCapacity))
	},
	"uniform": func(r *rand.Rand) string { return fmt.Sprint("k", r.IntN(auditCapacity)) },
}

// auditLog is one audited run: the calls storage saw, the requests made,
// and what the trusted side says of them.
type auditLog struct {
	calls    []oblivistore.PartitionCall
	requests int
	parts    int
	// walks follow each key: the partitions its request reads read, in
	// order (a read of no slot, which storage never sees, left out).
	walks [][]int
	// placements are where the real blocks of every level written landed.
	placements []audit.Placement
	// dummies are the dummy cache-ins' choices among their levels'
	// unread dummy slots.
	dummies []audit.Choice
}

// runAudit runs requests requests of w on a loaded store with opts, its
// choices seeded by auditSeed(seed), and returns what storage saw and what
// the trace told of it.
func runAudit(t *testing.T, opts oblivistore.Options, seed byte, w workload, requests int) auditLog {
	t.Helper()
	rec := &recorder{keys: map[uint64]string{}}
	seeded := auditSeed(seed)
	opts.TestingKnobs.Seed, opts.TestingKnobs.Trace, opts.TestingKnobs.SerialIO = &seeded, rec.trace(), true
	log := &observe.MemoryLog{}
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "oblivistore", Backend: mem.New(), Keys: kvtest.NewKeys(t),
		Capacity: auditCapacity, ValueSize: 16, Options: opts, TapLog: log})
	if err != nil {
		t.Fatal(err)
	}
	loader, _ := kv.AsLoader(s)
	if _, err := loader.Load(t.Context(), func(yield func(string, []byte) bool) {
		for i := range auditCapacity {
			if !yield(fmt.Sprint("k", i), []byte("v")) {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	drive(t, s, w, requests)
	parts := int(kvtest.Stat(t, s.Stats(), "partitions"))
	// Close first: the shuffler may still issue reads after the last
	// reply, and every read issued must be on the log.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	calls, err := oblivistore.ParsePartitionCalls(log.Records(), oblivistore.SlotPrefix, rec.issued)
	if err != nil {
		t.Fatal(err)
	}
	walks, err := rec.walks(calls)
	if err != nil {
		t.Fatal(err)
	}
	return auditLog{calls: calls, requests: requests, parts: parts, walks: walks, placements: rec.placements, dummies: rec.dummies}
}

// recorder gathers what the trace tells of a run.
type recorder struct {
	mu     sync.Mutex
	issued []oblivistore.IssuedRead
	seqs   []uint64          // the request of each request read issued, in order
	keys   map[uint64]string // each admitted request's key
	// placements and dummies are as in auditLog.
	placements []audit.Placement
	dummies    []audit.Choice
}

func (r *recorder) trace() oblivistore.Trace {
	return oblivistore.Trace{
		Read: func(p int32, slots []oblivistore.Slot, seq uint64) {
			addrs := make([]string, len(slots))
			for i, x := range slots {
				addrs[i] = oblivistore.SlotAddr(x)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.issued = append(r.issued, oblivistore.IssuedRead{P: int(p), Addrs: addrs, Request: seq != 0})
			if seq != 0 {
				r.seqs = append(r.seqs, seq)
			}
		},
		Admitted: func(seq uint64, key string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.keys[seq] = key
		},
		Placed: func(_ int32, l int8, reals []int32) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for g, x := range reals {
				r.placements = append(r.placements, audit.Placement{Slot: int(x), Slots: 2 << l, Gathered: g, Of: len(reals)})
			}
		},
		DummyRead: func(rank, unread int) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.dummies = append(r.dummies, audit.Choice{Rank: rank, Unread: unread})
		},
	}
}

// walks follows every key through calls: the partitions of its request
// reads, as storage saw them. ParsePartitionCalls keeps the issued reads'
// order, so the i-th request read of calls is the i-th issued.
func (r *recorder) walks(calls []oblivistore.PartitionCall) ([][]int, error) {
	byKey := map[string][]int{}
	i := 0
	for _, c := range calls {
		if !c.Request {
			continue
		}
		if i == len(r.seqs) {
			return nil, fmt.Errorf("more request reads on the log than the core issued (%d)", len(r.seqs))
		}
		key, ok := r.keys[r.seqs[i]]
		if !ok {
			return nil, fmt.Errorf("request read %d is for request %d, never admitted", i, r.seqs[i])
		}
		i++
		if len(c.Slots) > 0 {
			byKey[key] = append(byKey[key], c.P)
		}
	}
	walks := make([][]int, 0, len(byKey))
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		walks = append(walks, byKey[key])
	}
	return walks, nil
}

// drive issues requests of w from auditClients clients.
func drive(t *testing.T, s kv.Store, w workload, requests int) {
	var wg sync.WaitGroup
	for c := range auditClients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 7))
			for i := range requests / auditClients {
				var err error
				switch key := w(r); {
				case i%auditMissing == 0:
					_, _, err = s.Get(context.Background(), fmt.Sprint("missing-", c, "-", i))
				case i%2 == 0:
					_, _, err = s.Get(context.Background(), key)
				default:
					err = s.Put(context.Background(), key, []byte{byte(i)})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func (l auditLog) checks(name string) []audit.Check {
	return []audit.Check{
		oblivistore.SlotsReadOnce(name+": slots read once", l.calls),
		oblivistore.LevelsReadOnce(name+": levels read once", l.calls, l.requests),
		audit.Uniform(name+": uniform partitions", oblivistore.PartitionCounts(l.calls, l.parts)),
	}
}

// positionBins is how many bins the position checks group positions,
// slots and ranks into.
const positionBins = 8

// The names the position checks end with.
const (
	dummyChoices  = "dummy cache-ins uniform among the level's unread dummies"
	unreadChoices = "slots read uniform among the level's unread slots (Tap alone)"
)

// positionChecks are the audits of where blocks go:
//
//   - following one key (audit.FollowKey): the partitions a key's block
//     is read from across its accesses are uniform, each independent of
//     the one before and no more often the same again than chance (each
//     access reassigns the block to a fresh random partition, Sec.
//     III-A); the trace says which request read is which key's;
//   - placements (audit.Placements): the slot each real block lands in
//     when a level is written is uniform over the level's slots and
//     independent of the order the blocks were gathered (Fig. 7, step
//     3, "Permute"); the trace says which slots are real;
//   - dummy choices (audit.Choices): a dummy cache-in takes a slot
//     uniform among its level's unread dummy slots (Table I); the trace
//     says which are dummies;
//   - from the Tap alone (oblivistore.UnreadSlotChoices): every slot read is
//     uniform among the slots of its level not read since the level was
//     written, by level and by one slot of the level per call or several
//     (audit.ChoicesByGroup), the check `oblivkv audit` can make.
func (l auditLog) positionChecks(name string) []audit.Check {
	checks := audit.FollowKey(name, l.walks, l.parts, positionBins)
	checks = append(checks, audit.Placements(name, l.placements, positionBins)...)
	return append(checks,
		audit.Choices(name+": "+dummyChoices, l.dummies, positionBins),
		audit.ChoicesByGroup(name+": "+unreadChoices, oblivistore.UnreadSlotChoices(l.calls), positionBins))
}

// passAll fails t on every check that does not pass.
func passAll(t *testing.T, checks []audit.Check) {
	t.Helper()
	for _, c := range checks {
		t.Log(c)
		if !c.Pass() {
			t.Error(c)
		}
	}
}

func auditSeed(i byte) [32]byte { return [32]byte{i} }

// TestObliviousAudit runs the hot and uniform workloads at the default
// options: each passes every check, and the two workloads' partition
// counts are alike.
func TestObliviousAudit(t *testing.T) {
	logs := map[string]auditLog{}
	for _, name := range []string{"hot", "uniform"} {
		logs[name] = runAudit(t, oblivistore.Options{}, 1, workloads[name], auditRequests)
		passAll(t, append(logs[name].checks(name), logs[name].positionChecks(name)...))
	}
	passAll(t, []audit.Check{audit.Homogeneous("partitions, hot against uniform", oblivistore.PartitionCounts(logs["hot"].calls, logs["hot"].parts),
		oblivistore.PartitionCounts(logs["uniform"].calls, logs["uniform"].parts))})
}

// TestAuditWithGroups runs the checks of TestObliviousAudit on a store of
// four partition groups, each with its own shuffler and semaphores: each
// workload passes every check, and the two workloads' partition counts
// are alike; and each injected leak that the first checks catch
// (TestAuditCatchesLeaks) fails one of them decisively there too.
func TestAuditWithGroups(t *testing.T) {
	groups := oblivistore.Options{Groups: 4}
	logs := map[string]auditLog{}
	for _, name := range []string{"hot", "uniform"} {
		logs[name] = runAudit(t, groups, 5, workloads[name], auditRequests)
		passAll(t, append(logs[name].checks(name), logs[name].positionChecks(name)...))
	}
	passAll(t, []audit.Check{audit.Homogeneous("partitions, hot against uniform", oblivistore.PartitionCounts(logs["hot"].calls, logs["hot"].parts),
		oblivistore.PartitionCounts(logs["uniform"].calls, logs["uniform"].parts))})
	for name, leak := range oblivistore.Leaks {
		if _, positional := leakCases[name]; positional {
			continue
		}
		t.Run(name, func(t *testing.T) {
			leaky := groups
			leaky.TestingKnobs.Leak = leak
			if l := runAudit(t, leaky, 2, workloads["hot"], auditRequests); !anyDecisive(t, l.checks(name)) {
				t.Errorf("no check fails decisively on the leak %q with %d groups", name, groups.Groups)
			}
		})
	}
}

// longLogs are clean runs of the hot and uniform workloads at simOptions
// (a fractional eviction rate and a throttled shuffler, so that early
// cache-ins and blocked admissions happen), four times as long as
// TestObliviousAudit's: TestAuditAtOtherOptions audits them and
// TestAuditRejectsDoctoredLogs doctors one. They are made once for both.
var longLogs struct {
	sync.Once
	logs map[string]auditLog
}

func otherLogs(t *testing.T) map[string]auditLog {
	longLogs.Do(func() {
		logs := map[string]auditLog{}
		for name, seed := range map[string]byte{"uniform": 3, "hot": 4} {
			logs[name] = runAudit(t, simOptions, seed, workloads[name], 4*auditRequests)
		}
		longLogs.logs = logs
	})
	if longLogs.logs == nil {
		t.Fatal("the runs at simOptions failed in an earlier test")
	}
	return longLogs.logs
}

// TestAuditAtOtherOptions: every check of TestObliviousAudit passes at simOptions.
func TestAuditAtOtherOptions(t *testing.T) {
	logs := otherLogs(t)
	for _, name := range []string{"hot", "uniform"} {
		passAll(t, append(logs[name].checks(name), logs[name].positionChecks(name)...))
	}
	passAll(t, []audit.Check{audit.Homogeneous("partitions, hot against uniform", oblivistore.PartitionCounts(logs["hot"].calls, logs["hot"].parts),
		oblivistore.PartitionCounts(logs["uniform"].calls, logs["uniform"].parts))})
}

// leakCases are the leaks the first checks miss: the workload that shows
// it (a keyed partition makes a hot key's partition fail "uniform
// partitions", but under uniform keys nothing but following a key shows
// it) and the position checks that must fail on it decisively.
var leakCases = map[string]struct {
	workload string
	caughtBy []string
}{
	"keyed partition":          {"uniform", []string{"consecutive positions of one key independent", "same position again"}},
	"level written unpermuted": {"hot", []string{"slots real blocks land in uniform", "slot independent of gathering order", unreadChoices}},
	"dummies read in order":    {"hot", []string{dummyChoices, unreadChoices}},
}

// TestAuditCatchesLeaks: each injected leak fails a check decisively:
// the first ones one of the checks of what is read on the hot workload;
// those of leakCases, which the first checks miss (logged), the position
// checks named there on the workload named there.
func TestAuditCatchesLeaks(t *testing.T) {
	for name, leak := range oblivistore.Leaks {
		t.Run(name, func(t *testing.T) {
			lc, positional := leakCases[name]
			w := cmp.Or(lc.workload, "hot")
			leaky := oblivistore.Options{TestingKnobs: oblivistore.TestingKnobs{Leak: leak}}
			l := runAudit(t, leaky, 2, workloads[w], auditRequests)
			if !positional {
				if !anyDecisive(t, l.checks(name)) {
					t.Errorf("no check fails decisively on the leak %q", name)
				}
				return
			}
			for _, c := range l.checks(w) {
				t.Logf("first check: %v", c)
			}
			checks := l.positionChecks(w)
			for _, c := range checks {
				t.Logf("position check: %v", c)
			}
			for _, want := range lc.caughtBy {
				i := slices.IndexFunc(checks, func(c audit.Check) bool { return strings.HasSuffix(c.Name, want) })
				switch {
				case i < 0:
					t.Fatalf("no check %q", want)
				case !checks[i].Decisive():
					t.Errorf("not failed decisively: %v", checks[i])
				}
			}
		})
	}
}

func anyDecisive(t *testing.T, checks []audit.Check) bool {
	caught := false
	for _, c := range checks {
		if c.Decisive() {
			t.Log(c)
			caught = true
		}
	}
	return caught
}

// TestAuditRejectsDoctoredLogs: a log in which one partition is read
// twice as often (each of its request reads repeated) fails every check,
// and the two-sample test against an honest log. The logs are four times
// longer than TestObliviousAudit's, so that doubling one partition of 32
// fails the statistical checks decisively.
func TestAuditRejectsDoctoredLogs(t *testing.T) {
	logs := otherLogs(t)
	l := logs["uniform"]
	var doctored []oblivistore.PartitionCall
	for _, c := range l.calls {
		doctored = append(doctored, c)
		if c.Request && c.P == 0 {
			doctored = append(doctored, c)
		}
	}
	l.calls = doctored
	for _, c := range l.checks("doctored") {
		t.Log(c)
		if !c.Decisive() {
			t.Errorf("%s: not rejected decisively", c.Name)
		}
	}
	honest := logs["hot"]
	c := audit.Homogeneous("doctored against honest", oblivistore.PartitionCounts(doctored, l.parts), oblivistore.PartitionCounts(honest.calls, honest.parts))
	t.Log(c)
	if !c.Decisive() {
		t.Errorf("two-sample test: not rejected decisively")
	}
}

// The semaphore audit (Invariant 1): every semaphore change depends only
// on public information. A scheduled run (one request per tick, every
// backend call completing simTicks ticks after it is issued) of each
// workload is replayed by the simulator of Theorem 1, which sees only the
// run's public inputs (arrivals, completions by ID) and the partitions its
// requests read, and holds no data: it must reproduce the run's
// semaphore values after every input exactly.
const (
	simCapacity = 1024
	simRequests = 6000
	simTicks    = 3
)

func scheduled(name string, r *rand.Rand) []oblivistore.Access {
	accesses := make([]oblivistore.Access, simRequests)
	for i := range accesses {
		a := &accesses[i]
		a.Key = workloads[name](r)
		switch {
		case i%auditMissing == 0:
			a.Key = fmt.Sprint("missing-", i)
		case i%2 == 0:
			a.Op = oblivistore.OpGet
		default:
			a.Op = oblivistore.OpPut
		}
	}
	return accesses
}

// simOptions throttle the shuffler (little I/O per access, a small
// buffer) so that early cache-ins and blocked admissions happen.
var simOptions = oblivistore.Options{EvictionRate: 1.5, ShuffleIOPerAccess: 6, EvictionsAhead: 8}

func TestSemaphoresSimulated(t *testing.T) {
	seed := auditSeed(4)
	for _, name := range []string{"hot", "uniform"} {
		run, err := oblivistore.Schedule(simCapacity, simOptions, seed, simCapacity, scheduled(name, rand.New(rand.NewPCG(5, 5))), simTicks)
		if err != nil {
			t.Fatal(err)
		}
		sims, err := oblivistore.Simulate(simCapacity, simOptions, seed, run)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if i := firstDifference(run.Sems, sims); i >= 0 {
			t.Fatalf("%s: the simulator's semaphores differ after input %d of %d: %+v, run %+v", name, i, len(run.Sems), sims[i], run.Sems[i])
		}
		t.Logf("%s: %d inputs, semaphores reproduced from public information; %s", name, len(run.Sems), semaphoreRange(run.Sems))
	}
}

// TestSemaphoreAuditCatchesLeaks: the simulator fails to reproduce the
// semaphores of a run with an injected leak that changes what the
// scheduler does, and of a run whose log of partitions is doctored so
// that one partition is read twice as often. A leak of secret choices
// only (oblivistore.Unscheduled) leaves the scheduler as it was: the
// simulator must reproduce its run, which shows the leak is one the
// semaphore audit cannot see, not one it misses.
func TestSemaphoreAuditCatchesLeaks(t *testing.T) {
	seed := auditSeed(6)
	accesses := scheduled("hot", rand.New(rand.NewPCG(7, 7)))
	for name, leak := range oblivistore.Leaks {
		t.Run(name, func(t *testing.T) {
			leaky := simOptions
			leaky.TestingKnobs.Leak = leak
			run, err := oblivistore.Schedule(simCapacity, leaky, seed, simCapacity, accesses, simTicks)
			if err != nil {
				t.Fatal(err)
			}
			sims, err := oblivistore.Simulate(simCapacity, simOptions, seed, run)
			reproduced := err == nil && firstDifference(run.Sems, sims) < 0
			switch {
			case oblivistore.Unscheduled[name] && !reproduced:
				t.Errorf("the simulator did not reproduce the semaphores of a run whose leak %q changes only secret choices (%v)", name, err)
			case !oblivistore.Unscheduled[name] && reproduced:
				t.Errorf("the simulator reproduced the semaphores of a run with the leak %q", name)
			}
		})
	}
	t.Run("doctored partitions", func(t *testing.T) {
		run, err := oblivistore.Schedule(simCapacity, simOptions, seed, simCapacity, accesses, simTicks)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(run.Partitions); i += 32 {
			run.Partitions[i] = 0
		}
		if sims, err := oblivistore.Simulate(simCapacity, simOptions, seed, run); err == nil && firstDifference(run.Sems, sims) < 0 {
			t.Error("the simulator reproduced the semaphores from a doctored log")
		}
	})
}

func firstDifference(a, b []oblivistore.Semaphores) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

func field(s oblivistore.Semaphores, name string) int64 {
	switch name {
	case "early":
		return s.Early
	case "buffer":
		return s.Buffer
	case "evictions":
		return s.Evictions
	}
	return s.IO
}

func semaphoreRange(sems []oblivistore.Semaphores) string {
	var b strings.Builder
	for _, name := range []string{"early", "buffer", "evictions", "io"} {
		lo, hi := field(sems[0], name), field(sems[0], name)
		for _, s := range sems {
			lo, hi = min(lo, field(s, name)), max(hi, field(s, name))
		}
		fmt.Fprintf(&b, "%s in [%d, %d] ", name, lo, hi)
	}
	return b.String()
}
