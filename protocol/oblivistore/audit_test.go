package oblivistore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
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
// On each log, three checks:
//
//   - slots read once (exact, audit.SlotsReadOnce): no slot is read twice
//     between two writes of its level, every write writes whole levels;
//   - levels read once (exact, audit.LevelsReadOnce): every request reads
//     one slot of every level of its partition that can be read, and
//     nothing else;
//   - uniform partitions: the partitions requests read pass a chi-square
//     test of uniformity at audit.Significance.
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

// auditLog is one audited run: the calls storage saw, the requests made.
type auditLog struct {
	calls    []audit.PartitionCall
	requests int
	parts    int
}

// runAudit runs auditRequests requests of w on a loaded store with opts
// and returns what storage saw.
func runAudit(t *testing.T, opts oblivistore.Options, w workload, requests int) auditLog {
	t.Helper()
	var mu sync.Mutex
	var issued []audit.IssuedRead
	opts = oblivistore.WithReadLog(oblivistore.Serial(opts), func(p int32, slots []oblivistore.Slot, request bool) {
		addrs := make([]string, len(slots))
		for i, x := range slots {
			addrs[i] = oblivistore.SlotAddr(x)
		}
		mu.Lock()
		issued = append(issued, audit.IssuedRead{P: int(p), Addrs: addrs, Request: request})
		mu.Unlock()
	})
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
	calls, err := audit.ParsePartitionCalls(log.Records(), oblivistore.SlotPrefix, issued)
	if err != nil {
		t.Fatal(err)
	}
	return auditLog{calls: calls, requests: requests, parts: parts}
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
		audit.SlotsReadOnce(name+": slots read once", l.calls),
		audit.LevelsReadOnce(name+": levels read once", l.calls, l.requests),
		audit.Uniform(name+": uniform partitions", audit.PartitionCounts(l.calls, l.parts)),
	}
}

func auditSeed(i byte) [32]byte { return [32]byte{i} }

func TestAudit(t *testing.T) {
	logs := map[string]auditLog{}
	for _, name := range []string{"hot", "uniform"} {
		logs[name] = runAudit(t, oblivistore.WithSeed(oblivistore.Options{}, auditSeed(1)), workloads[name], auditRequests)
		for _, c := range logs[name].checks(name) {
			t.Log(c)
			if !c.Pass() {
				t.Error(c)
			}
		}
	}
	c := audit.Homogeneous("partitions, hot against uniform", audit.PartitionCounts(logs["hot"].calls, logs["hot"].parts),
		audit.PartitionCounts(logs["uniform"].calls, logs["uniform"].parts))
	t.Log(c)
	if !c.Pass() {
		t.Error(c)
	}
}

// TestAuditCatchesLeaks: each injected leak fails one of the checks of
// TestAudit decisively on the hot workload.
func TestAuditCatchesLeaks(t *testing.T) {
	for name, leak := range oblivistore.Leaks {
		t.Run(name, func(t *testing.T) {
			l := runAudit(t, oblivistore.WithLeak(oblivistore.WithSeed(oblivistore.Options{}, auditSeed(2)), leak), workloads["hot"], auditRequests)
			if !anyDecisive(t, l.checks(name)) {
				t.Errorf("no check fails decisively on the leak %q", name)
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
// longer than TestAudit's, so that doubling one partition of 32 fails the
// statistical checks decisively.
func TestAuditRejectsDoctoredLogs(t *testing.T) {
	l := runAudit(t, oblivistore.WithSeed(oblivistore.Options{}, auditSeed(3)), workloads["uniform"], 4*auditRequests)
	var doctored []audit.PartitionCall
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
	honest := runAudit(t, oblivistore.WithSeed(oblivistore.Options{}, auditSeed(4)), workloads["hot"], 4*auditRequests)
	c := audit.Homogeneous("doctored against honest", audit.PartitionCounts(doctored, l.parts), audit.PartitionCounts(honest.calls, honest.parts))
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
// semaphores of a run with an injected leak, and of a run whose log of
// partitions is doctored so that one partition is read twice as often.
func TestSemaphoreAuditCatchesLeaks(t *testing.T) {
	seed := auditSeed(6)
	accesses := scheduled("hot", rand.New(rand.NewPCG(7, 7)))
	for name, leak := range oblivistore.Leaks {
		t.Run(name, func(t *testing.T) {
			run, err := oblivistore.Schedule(simCapacity, oblivistore.WithLeak(simOptions, leak), seed, simCapacity, accesses, simTicks)
			if err != nil {
				t.Fatal(err)
			}
			if sims, err := oblivistore.Simulate(simCapacity, simOptions, seed, run); err == nil && firstDifference(run.Sems, sims) < 0 {
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
