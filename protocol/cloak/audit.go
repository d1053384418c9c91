package cloak

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
)

// auditSpec is Cloak's registration with `oblivkv audit`: its batches run
// on a clock the audit ticks (paceBatches), its store is journaled
// (its checkpoints are part of what storage sees), and analyse makes its
// checks of storage's view.
var auditSpec = &auditspec.Spec{
	Prefixes: []string{AddrPrefix},
	Ops:      1500, // at least one batch per round of the audit's requests
	Journal:  true,
	Pace:     paceBatches,
	Analyse:  analyse,
	Plots:    map[string]auditspec.Plot{"set": {Title: "Cloak: addresses read per reuse-distance set", YLabel: "addresses read"}},
}

const (
	// maxRoundTicks bounds the ticks a round of requests may need: a
	// waiting key is in a batch within as many ticks as there are
	// reuse-distance sets (the audit test waits as long).
	maxRoundTicks = 200
	// idleTicks are the ticks after the last request: batches leave
	// whether clients ask or not, idle ones too (Cloak Sec. 4).
	idleTicks = 20
	// positionBins is the number of bins of the positions and ages the
	// audit tests for independence (audit.PositionChecks).
	positionBins = 5
	// streakLength is how many consecutive batches reading one address
	// count as one run (Streaks; the audit test counts the same).
	streakLength = 10
)

// paceBatches runs the batches on a fake clock the audit advances: the
// requests go in rounds, and the audit ticks at least once per round and
// until every request of the round is answered, at most maxRoundTicks
// times, then idleTicks more with no client.
func paceBatches(options any) (any, auditspec.Clock, error) {
	o, err := kv.OptionsOf[Options](protocolName, options)
	o, c := onBatchClock(o)
	return o, c, err
}

// batchClock is a fake clock a store's batches run on
// (TestingKnobs.Clock), advanced one batch interval at a time.
type batchClock struct {
	clock *clockwork.FakeClock
	delta time.Duration
}

// onBatchClock returns o with its batches on a new batchClock, and the
// clock.
func onBatchClock(o Options) (Options, batchClock) {
	c := batchClock{clock: clockwork.NewFakeClock(), delta: o.EnsureDefaults(1).Delta} // Delta's default is the same at any capacity
	o.TestingKnobs.Clock = c.clock
	return o, c
}

// Round ticks once requests wait for a batch (or are all answered), and
// again until every request of the round is answered, at most
// maxRoundTicks times.
func (b batchClock) Round(ctx context.Context, r auditspec.Round) error {
	for ticks := 0; ; ticks++ {
		if err := auditspec.WaitUntil(ctx, func() bool { return r.Answered() || r.Stat(kv.StatPendingKeys) > 0 }); err != nil {
			return err
		}
		switch {
		case ticks > 0 && r.Answered():
			return nil
		case ticks == maxRoundTicks:
			return fmt.Errorf("%w after %d ticks", auditspec.ErrStalled, ticks)
		}
		r.Mark()
		if err := b.tick(ctx, r.Stat); err != nil {
			return err
		}
	}
}

// Finish ticks idleTicks times with no request waiting.
func (b batchClock) Finish(r auditspec.Round) {
	for range idleTicks {
		r.Mark()
		b.tick(context.Background(), r.Stat) // with no deadline: it cannot fail
	}
}

// tick advances the clock by one batch interval and returns once the
// store, whose statistics stat reports, has handled the tick: one batch,
// busy or idle.
func (b batchClock) tick(ctx context.Context, stat func(name string) float64) error {
	before := stat(kv.StatTicks)
	b.clock.Advance(b.delta)
	return auditspec.WaitUntil(ctx, func() bool { return stat(kv.StatTicks) > before })
}

// analyse makes Cloak's checks of one run: the budgets (b_d addresses
// from every set d, every batch, written back as read), one batch per
// tick of the audit's clock (Cloak Sec. 4: batches leave at a fixed rate,
// busy or idle), runs of one address over consecutive batches, the
// positions of addresses in batch calls, and the checkpoint schedule (a
// checkpoint every CheckpointBatches batches, whatever the clients
// wrote).
func analyse(r auditspec.Run) (auditspec.Analysis, error) {
	o, err := kv.OptionsOf[Options](r.Protocol, r.Options)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	budgets, err := o.BudgetsFor(r.Capacity)
	if err != nil {
		return auditspec.Analysis{}, err
	}
	v, err := ViewBatches(r.All, budgets)
	n := r.Workload + ": "
	if err != nil {
		v.Violations = append(v.Violations, err.Error())
	}
	open := r.All[:r.Closing]
	checks := []audit.Check{
		audit.Exact(n+"b_d addresses from every set d, written back as read", v.Violations),
		audit.OneBatchPerTick(n+"one batch per tick", open, isBatchRead, ticks(r.Marks)),
		Streaks(n+"one address read by consecutive batches", r.All, budgets, streakLength),
		Checkpoints(r.Workload, open, CheckpointBatches),
	}
	checks = append(checks, audit.PositionChecks(r.Workload, audit.BatchLinks(r.All, AddrPrefix), positionBins)...)
	return auditspec.Analysis{Checks: checks, Plots: map[string][]int{"set": setCounts(v, budgets)}}, nil
}

// ticks returns the audit's marks as indices into the log of every call
// from the first, which the Tap numbers from 1.
func ticks(marks []uint64) []int {
	out := make([]int, len(marks))
	for i, m := range marks {
		out[i] = int(m)
	}
	return out
}

// isBatchRead selects a batch's Read.
func isBatchRead(r observe.Record) bool { return r.Op == observe.OpRead && cloakCall(r) }

// setCounts is how many addresses the batches of v took from each
// reuse-distance set d (1-based; cell d-1), as storage infers the sets:
// the budgets, batch after batch.
func setCounts(v BatchView, budgets []int) []int {
	out := make([]int, len(budgets))
	for i, b := range budgets {
		out[i] = b * v.Batches
	}
	return out
}
