package bench

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oblivkv/oblivkv/bench/hist"
	"github.com/oblivkv/oblivkv/bench/progress"
	"github.com/oblivkv/oblivkv/bench/workload"
)

// Run benchmarks each protocol in turn with the same configuration and
// seed, opening a fresh target for each, so their figures compare as
// ratios from one run. It stops at the first protocol that fails and
// returns the results so far with the error.
func Run(ctx context.Context, cfg Config, protocols []string, open Opener) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var out []Result
	for _, p := range protocols {
		r, err := RunOne(ctx, cfg, p, open)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// RunOne opens protocol's target, loads it, warms it up, measures it and
// closes it (discarding its data).
func RunOne(ctx context.Context, cfg Config, protocol string, open Opener) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	t, err := open(ctx, protocol)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		// Clean up even when the run was interrupted.
		err = errors.Join(err, t.Close(context.WithoutCancel(ctx)))
	}()
	return measure(ctx, cfg, protocol, t)
}

// measure loads the open target, warms it up and measures it.
func measure(ctx context.Context, cfg Config, protocol string, t Target) (Result, error) {
	start := time.Now()
	if err := load(ctx, cfg, protocol, t); err != nil {
		return Result{}, fmt.Errorf("load: %w", err)
	}
	loadTime := time.Since(start)
	r := newRunner(cfg, t)
	r.phase(ctx, "warm-up "+protocol, cfg.Warmup.Ops, cfg.Warmup.Duration, false)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	before, err := t.Snapshot(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("counters before the run: %w", err)
	}
	m := r.phase(ctx, "run "+protocol, cfg.Ops, cfg.Duration, true)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	after, err := t.Snapshot(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("counters after the run: %w", err)
	}
	res := newResult(cfg, protocol, m, before, after)
	res.LoadSeconds = loadTime.Seconds()
	return res, nil
}

// load stores records 0..n-1 (their keys: see workload.KeysFor) with
// random values, drawing a bar.
func load(ctx context.Context, cfg Config, protocol string, t Target) error {
	var done atomic.Int64
	bar := progress.Start(cfg.Progress, "load "+protocol, int64(cfg.Records), done.Load)
	defer bar.Finish()
	return t.Load(ctx, items(cfg, &done), cfg.Concurrency)
}

// items yields every record with a value drawn from the run's load stream,
// counting what it yields.
func items(cfg Config, done *atomic.Int64) iter.Seq2[string, []byte] {
	keys := workload.KeysFor(cfg.Keys, uint64(cfg.Records))
	return func(yield func(string, []byte) bool) {
		r := rand.New(rand.NewPCG(cfg.Seed, loadStream))
		for i := range uint64(cfg.Records) {
			if !yield(keys.Key(i), workload.Value(r, cfg.ValueSize)) {
				return
			}
			done.Add(1)
		}
	}
}

// loadStream is the PCG stream of the load's values; worker w uses w.
const loadStream = 1 << 62

// runner drives the workers of one protocol's run.
type runner struct {
	cfg     Config
	t       Target
	keys    workload.Keys
	workers []*worker
	// cursor, when the key source is a workload.Sequence, hands its
	// entries to all the workers, across the warm-up and the measured
	// phase; each protocol's runner starts it afresh.
	cursor *workload.Cursor
}

// worker owns one random stream, one key stream and its own tallies, so
// workers share nothing on the hot path.
type worker struct {
	r     *rand.Rand
	keys  workload.Chooser
	lat   hist.Histogram
	tally tally
}

// tally counts one worker's measured operations.
type tally struct {
	ops, reads, updates, rmws uint64
	errors, misses            uint64
	payload                   uint64 // logical payload bytes, see Result
	firstErr                  error
}

func (a *tally) add(b tally) {
	a.ops += b.ops
	a.reads += b.reads
	a.updates += b.updates
	a.rmws += b.rmws
	a.errors += b.errors
	a.misses += b.misses
	a.payload += b.payload
	if a.firstErr == nil {
		a.firstErr = b.firstErr
	}
}

func newRunner(cfg Config, t Target) *runner {
	r := &runner{cfg: cfg, t: t, keys: workload.KeysFor(cfg.Keys, uint64(cfg.Records))}
	if seq, ok := cfg.Keys.(workload.Sequence); ok {
		r.cursor = workload.NewCursor(seq, cfg.Mix, cfg.Seed)
	}
	for id := range cfg.Concurrency {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(id)))
		w := &worker{r: rng}
		if r.cursor == nil {
			w.keys = cfg.Keys.Worker(id, rng)
		}
		r.workers = append(r.workers, w)
	}
	return r
}

// measured is what a recorded phase produced.
type measured struct {
	tally
	lat     hist.Histogram
	elapsed time.Duration
}

// phase runs ops operations (or, when ops is 0, for duration) on every
// worker and waits for all of them: phases never overlap, so the counters
// read between two phases belong to one phase only. Figures are kept only
// when record is set.
func (r *runner) phase(ctx context.Context, label string, ops int, duration time.Duration, record bool) measured {
	if ops <= 0 && duration <= 0 {
		return measured{}
	}
	s := newSchedule(r.cfg.Rate, ops, duration)
	bar := progress.Start(r.cfg.Progress, label, s.total(), s.progress)
	var wg sync.WaitGroup
	for _, w := range r.workers {
		w.lat, w.tally = hist.Histogram{}, tally{}
		wg.Go(func() { r.loop(ctx, w, s, record) })
	}
	wg.Wait()
	m := measured{elapsed: time.Since(s.start)}
	bar.Finish()
	for _, w := range r.workers {
		m.tally.add(w.tally)
		m.lat.Merge(&w.lat)
	}
	return m
}

// loop claims and runs operations until the schedule ends.
func (r *runner) loop(ctx context.Context, w *worker, s *schedule, record bool) {
	for ctx.Err() == nil {
		intended, ok := s.next()
		if !ok {
			return
		}
		if !s.wait(ctx, intended) {
			return
		}
		op, rec := r.draw(w)
		o := r.do(ctx, w, op, rec)
		took := time.Since(intended)
		s.completed.Add(1)
		if record {
			w.count(op, o, took)
		}
	}
}

// draw picks the next operation and its record: from the worker's own
// streams, or the next entry of the shared sequence (see
// workload.Cursor.Next).
func (r *runner) draw(w *worker) (workload.Op, uint64) {
	if r.cursor != nil {
		return r.cursor.Next()
	}
	return r.cfg.Mix.Next(w.r), w.keys.Next()
}

// outcome is what one operation did.
type outcome struct {
	payload uint64
	miss    bool
	err     error
}

func (w *worker) count(op workload.Op, o outcome, took time.Duration) {
	if o.err != nil {
		w.tally.errors++
		if w.tally.firstErr == nil {
			w.tally.firstErr = o.err
		}
		return
	}
	w.tally.ops++
	w.tally.payload += o.payload
	if o.miss {
		w.tally.misses++
	}
	switch op {
	case workload.Read:
		w.tally.reads++
	case workload.Update:
		w.tally.updates++
	case workload.ReadModifyWrite:
		w.tally.rmws++
	}
	w.lat.RecordDuration(took)
}

// do runs one YCSB operation on record rec.
func (r *runner) do(ctx context.Context, w *worker, op workload.Op, rec uint64) outcome {
	key := r.keys.Key(rec)
	var o outcome
	if op == workload.Read || op == workload.ReadModifyWrite {
		val, ok, err := r.t.Get(ctx, key)
		if err != nil {
			return outcome{err: fmt.Errorf("get %s: %w", key, err)}
		}
		o.payload += uint64(len(val))
		o.miss = !ok
	}
	if op == workload.Update || op == workload.ReadModifyWrite {
		val := workload.Value(w.r, r.cfg.ValueSize)
		if err := r.t.Put(ctx, key, val); err != nil {
			return outcome{err: fmt.Errorf("put %s: %w", key, err)}
		}
		o.payload += uint64(len(val))
	}
	return o
}
