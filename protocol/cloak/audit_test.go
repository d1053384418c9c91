package cloak_test

import (
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
	"github.com/oblivkv/oblivkv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/cloak"
)

// The exact budget audit (seed 002, Secs. 4 and 5.1) over a Tap, at N =
// 4096 with the default budgets (b_1 = 28, s = 1: beta = 179) and Delta =
// 10 ms.
const (
	auditN       = 4096
	auditBusy    = 80 // batches with clients running
	auditIdle    = 10 // then batches with none
	auditClients = 16
	auditDelta   = 10 * time.Millisecond
	// maxJitter bounds how far 95% of batches start from the grid of
	// Delta the ticker keeps: a start is late only by scheduling delay on
	// the proxy's CPU, and a late batch does not delay the next.
	maxJitter = 2 * time.Millisecond
	// clientPause is each client's pause between requests. Without it the
	// clients of a hot key, always answered from the cache, keep both cores
	// busy and the Go scheduler delays the batch goroutine by up to its
	// 10 ms time slice: batch timing then shows the proxy's CPU load (see
	// docs/protocols.md). With it they offer about 16/(pause + service)
	// requests per second, as clients across a network would.
	clientPause = 200 * time.Microsecond
	// maxRecovered bounds the share of the 100 most popular keys a
	// frequency-analysis attacker recovers; chance is about 100/M, M =
	// 4181 addresses: 2.4%.
	maxRecovered = 0.05
)

type auditRun struct {
	records   []observe.Record
	recovered float64
	util      float64
	beta      float64
}

// runAudit loads auditN keys into a cloak store over a tap, runs clients
// drawing keys from next (half gets, half puts) for auditBusy batches, then
// none for auditIdle, and scores a frequency-analysis attack that knows
// popularity (most popular first) against where the keys are at the end.
func runAudit(t *testing.T, next func(*rand.Rand) uint64, popularity []int) auditRun {
	t.Helper()
	ctx := t.Context()
	var log observe.MemoryLog
	s, err := cloak.OpenRaw(ctx, kv.Env{Backend: observe.NewTap(mem.New(), &log), Keys: kvtest.NewKeys(t),
		Capacity: auditN, ValueSize: 16, MaxKeySize: 64, Fresh: true, Options: cloak.Options{Delta: auditDelta}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := func(i uint64) string { return fmt.Sprintf("key%05d", i) }
	if _, err := s.(kv.Loader).Load(ctx, func(yield func(string, []byte) bool) {
		for i := range uint64(auditN) {
			if !yield(key(i), []byte(key(i))) {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	batches := func() float64 { return kvtest.Stat(t, s.Stats(), "batches") }
	var wg sync.WaitGroup
	for c := range auditClients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 3))
			for batches() < auditBusy {
				k := key(next(r))
				var err error
				if r.IntN(2) == 0 {
					err = s.Put(ctx, k, []byte(k))
				} else {
					_, _, err = s.Get(ctx, k)
				}
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(clientPause)
			}
		})
	}
	wg.Wait()
	for batches() < auditBusy+auditIdle {
		time.Sleep(auditDelta)
	}
	run := auditRun{records: log.Records(), util: kvtest.Stat(t, s.Stats(), "batch_utilisation"), beta: kvtest.Stat(t, s.Stats(), "beta")}
	var reads []observe.Record
	for _, r := range run.records {
		if r.Op == observe.OpRead && len(r.Addrs) > 0 && strings.HasPrefix(r.Addrs[0], audit.CloakAddrPrefix) {
			reads = append(reads, r)
		}
	}
	pop := make([]string, len(popularity))
	truth := map[string]string{}
	for i, p := range popularity {
		pop[i] = key(uint64(p))
		truth[pop[i]] = cloak.Where(s, pop[i])
	}
	guess := audit.FrequencyAttack(audit.RankAddresses(reads, observe.OpRead), pop)
	run.recovered = audit.Recovered(guess, pop, truth, 100)
	return run
}

// TestBudgetAudit: for a temporal (Sec. 7.1), a uniform and a one-hot-key
// workload, every batch, busy or idle, takes exactly b_d addresses from
// every set d and writes back the addresses it read; batches start Delta
// apart within maxJitter; and a frequency-analysis attacker recovers no
// more than maxRecovered of the 100 most popular keys.
func TestBudgetAudit(t *testing.T) {
	if cloak.AddrPrefix != audit.CloakAddrPrefix {
		t.Fatalf("audit.CloakAddrPrefix %q != cloak.AddrPrefix %q", audit.CloakAddrPrefix, cloak.AddrPrefix)
	}
	budgets := cloak.Budgets(auditN, 28, 1)
	temporal, err := workload.NewTemporal(auditN, 1, 1<<17, 5) // Sec. 7.1's generator, s = 1
	if err != nil {
		t.Fatal(err)
	}
	var cursor atomic.Uint64 // one trace, shared by the clients in order
	nextTemporal := func(*rand.Rand) uint64 { k, _, _ := temporal.At(cursor.Add(1) - 1); return k }
	ranked := byFrequency(temporal) // the temporal trace's popularity
	hot := make([]int, auditN)      // the hot key's: key 0 first
	for i := range hot {
		hot[i] = i
	}
	shuffled := slices.Clone(hot)
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, w := range []struct {
		name       string
		next       func(*rand.Rand) uint64
		popularity []int
	}{
		{"temporal", nextTemporal, ranked},
		{"uniform", func(r *rand.Rand) uint64 { return r.Uint64N(auditN) }, shuffled},
		{"hotkey", func(*rand.Rand) uint64 { return 0 }, hot},
	} {
		t.Run(w.name, func(t *testing.T) {
			run := runAudit(t, w.next, w.popularity)
			res, err := audit.CloakBudgets(run.records, budgets)
			if err != nil {
				t.Fatal(err)
			}
			if res.Batches < auditBusy+auditIdle {
				t.Fatalf("%d batches in the log; want at least %d", res.Batches, auditBusy+auditIdle)
			}
			for _, v := range res.Violations[:min(len(res.Violations), 5)] {
				t.Error(v)
			}
			offsets, maxGap := gridOffsets(res.Starts[1:], auditDelta) // the first batch waits for the bulk load
			t.Logf("%d batches of %v addresses, utilisation %.3f; start offsets from the Delta grid: p95 %v, max %v; largest gap %v; attacker recovered %.1f%% of the top 100",
				res.Batches, run.beta, run.util, offsets[len(offsets)*95/100], offsets[len(offsets)-1], maxGap, 100*run.recovered)
			if p95 := offsets[len(offsets)*95/100]; p95 > maxJitter {
				t.Errorf("5%% of batches start more than %v off the Delta grid; want at most %v", p95, maxJitter)
			}
			if maxGap > 3*auditDelta {
				t.Errorf("a gap of %v between batches; want at most 3*Delta", maxGap)
			}
			if run.recovered > maxRecovered {
				t.Errorf("frequency attack recovered %.1f%% of the top 100 keys; want at most %.0f%%", 100*run.recovered, 100*maxRecovered)
			}
		})
	}
}

// byFrequency returns the keys of a trace, most frequent first.
func byFrequency(tr *workload.Temporal) []int {
	count := make([]int, auditN)
	for i := range tr.Len() {
		k, _, _ := tr.At(i)
		count[k]++
	}
	keys := make([]int, auditN)
	for i := range keys {
		keys[i] = i
	}
	slices.SortStableFunc(keys, func(a, b int) int { return count[b] - count[a] })
	return keys
}

// gridOffsets returns how far each start lies from the nearest point of
// the grid k*delta + phase, sorted, where phase is the circular mean of the
// starts modulo delta (the ticker's grid is not otherwise visible), and
// the largest gap between starts.
func gridOffsets(starts []time.Duration, delta time.Duration) ([]time.Duration, time.Duration) {
	angle := func(d time.Duration) float64 { return 2 * math.Pi * float64(d%delta) / float64(delta) }
	var sin, cos float64
	for _, st := range starts {
		sin, cos = sin+math.Sin(angle(st)), cos+math.Cos(angle(st))
	}
	phase := time.Duration(math.Atan2(sin, cos) / (2 * math.Pi) * float64(delta))
	var offs []time.Duration
	var gap time.Duration
	for i, st := range starts {
		off := ((st-phase)%delta + delta) % delta
		offs = append(offs, min(off, delta-off))
		if i > 0 {
			gap = max(gap, st-starts[i-1])
		}
	}
	slices.Sort(offs)
	return offs, gap
}
