//go:build soak

package cloak_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/cloak"
)

// The real-time schedule, behind the soak build tag because it measures
// scheduling delay, which a loaded machine inflates:
//
//	go test -tags soak -run Soak -v ./protocol/cloak/
//
// soakDelta is the batch interval; maxJitter bounds how far 95% of batches
// start from the grid of Delta the ticker keeps: a start is late only by
// scheduling delay on the proxy's CPU, and a late batch does not delay the
// next.
const (
	soakDelta = 10 * time.Millisecond
	maxJitter = 2 * time.Millisecond
)

// TestSoakBudgetAudit: the workloads of TestObliviousAudit at the default
// parameters under the store's own ticker, Delta = 10 ms: every batch,
// busy or idle, takes exactly b_d addresses from every set d and writes
// back the addresses it read; 95% of batches start within maxJitter of the
// Delta grid, no gap between batches exceeds 3*Delta; and a
// frequency-analysis attacker recovers no more than maxRecovered of the
// 100 most popular keys. The clients' pause (clientPause) matters here:
// without it the clients of a hot key, always answered from the cache,
// keep both cores busy and the Go scheduler delays the batch goroutine by
// up to its 10 ms time slice, so batch timing shows the proxy's CPU load
// (see docs/protocols.md).
func TestSoakBudgetAudit(t *testing.T) {
	ws, err := auditWorkloads()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		t.Run(w.name, func(t *testing.T) {
			records, recovered, util := runSoak(t, w)
			res, err := cloak.ViewBatches(records, defaultParams.budgets)
			if err != nil {
				t.Fatal(err)
			}
			if res.Batches < auditBusy+auditIdle {
				t.Fatalf("%d batches in the log; want at least %d", res.Batches, auditBusy+auditIdle)
			}
			for _, v := range res.Violations[:min(len(res.Violations), 5)] {
				t.Error(v)
			}
			offsets, maxGap := gridOffsets(res.Starts[1:], soakDelta) // the first batch waits for the bulk load
			t.Logf("%d batches, utilisation %.3f; start offsets from the Delta grid: p95 %v, max %v; largest gap %v; attacker recovered %.1f%% of the top 100",
				res.Batches, util, offsets[len(offsets)*95/100], offsets[len(offsets)-1], maxGap, 100*recovered)
			if p95 := offsets[len(offsets)*95/100]; p95 > maxJitter {
				t.Errorf("5%% of batches start more than %v off the Delta grid; want at most %v", p95, maxJitter)
			}
			if maxGap > 3*soakDelta {
				t.Errorf("a gap of %v between batches; want at most 3*Delta", maxGap)
			}
			if recovered > maxRecovered {
				t.Errorf("frequency attack recovered %.1f%% of the top 100 keys; want at most %.0f%%", 100*recovered, 100*maxRecovered)
			}
		})
	}
}

// runSoak runs workload w on a journaled store (each batch's record is
// made durable before its Read, within the batch's start) under its own
// ticker for auditBusy batches, then auditIdle batches with no client,
// and returns the log, the attacker's recovery and the batch utilisation.
func runSoak(t *testing.T, w auditWorkload) ([]observe.Record, float64, float64) {
	t.Helper()
	ctx := t.Context()
	var log observe.MemoryLog
	keys := kvtest.NewKeys(t)
	j, err := journal.Open(t.TempDir(), keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	s, err := cloak.OpenRaw(ctx, kv.Env{Backend: observe.NewTap(mem.New(), &log), Keys: keys, Journal: j,
		Capacity: auditN, ValueSize: 16, MaxKeySize: 64, Fresh: true, Options: cloak.Options{Delta: soakDelta}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	loadKeys(t, s)
	batches := func() float64 { return kvtest.Stat(t, s.Stats(), "batches") }
	c := startClients(t, s, w)
	defer c.halt()
	for batches() < auditBusy {
		time.Sleep(soakDelta)
	}
	c.stop.Store(true)
	c.wg.Wait()
	for target := batches() + auditIdle; batches() < target; {
		time.Sleep(soakDelta)
	}
	records := log.Records()
	return records, attack(t, s, records, w.popularity), kvtest.Stat(t, s.Stats(), "batch_utilisation")
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
