// Package bench runs YCSB-style workloads against stores and reports what
// they cost: throughput, latency percentiles, backend round trips and
// bytes per operation, and amplification.
//
// It owns the run method: the load phase, the warm-up (whose figures are
// discarded), the measured phase in a closed loop (C workers, each issuing
// its next operation when the previous one returns) or an open loop
// (operations scheduled at a fixed rate, latency measured from each
// operation's intended start so a slow store cannot hide its queueing:
// no coordinated omission), and the report formats (table, JSON, CSV).
//
// It drives a Target: a kv.Store in this process (StoreTarget) or a RESP
// server (DialRESP). It must never open stores itself or know about
// deployment settings (backends, data directories, keys): a caller hands
// it an Opener, so this package builds without the backends, and runs
// against anything that stores keys.
package bench

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/oblivkv/oblivkv/bench/workload"
)

// Config is one benchmark: the same for every protocol of a run.
type Config struct {
	// Mix is the YCSB workload; Keys the key distribution over Records.
	// When Keys is a workload.Sequence (the temporal generator, a trace),
	// all the workers of a protocol's run replay it through one shared
	// cursor, warm-up first; if its entries carry operations (a trace
	// with an op column) they replace Mix. When Keys is a
	// *workload.Trace, its keys are the ones loaded and used (see
	// workload.KeysFor), and Records must be their number.
	Mix     workload.Mix
	Keys    workload.Distribution
	Records int
	// Ops is the number of measured operations; when 0, the measured phase
	// lasts Duration instead.
	Ops      int
	Duration time.Duration
	// Warmup runs before the measured phase; its figures are discarded.
	Warmup Warmup
	// ValueSize is the size of every value written, in bytes.
	ValueSize int
	// Concurrency is the number of workers: in a closed loop each has one
	// operation outstanding; in an open loop it bounds the operations
	// outstanding at once.
	Concurrency int
	// Rate, if positive, makes an open loop of Rate operations a second.
	Rate float64
	// Seed makes the operation and key streams reproducible. Every
	// protocol of a run sees the same streams.
	Seed uint64
	// Progress, if set, receives progress bars (give it stderr, and only
	// when stderr is a terminal).
	Progress io.Writer
	// Backend and BackendLatency are copied into the report.
	Backend        string
	BackendLatency time.Duration
}

// Warmup is how long the warm-up lasts: Ops operations, or Duration when
// Ops is 0. The zero Warmup is no warm-up.
type Warmup struct {
	Ops      int
	Duration time.Duration
}

func (w Warmup) String() string {
	switch {
	case w.Ops > 0:
		return strconv.Itoa(w.Ops) + " ops"
	case w.Duration > 0:
		return w.Duration.String()
	}
	return "none"
}

// DefaultWarmupShare is the warm-up, as a share of the measured phase,
// when none is given.
const DefaultWarmupShare = 0.1

// ParseWarmup reads a --warmup value against the measured phase (ops, or
// duration when ops is 0): "" or "auto" for 10% of it, "N%" for N% of it,
// an integer for that many operations, a duration such as "2s", or "0"
// for none.
func ParseWarmup(s string, ops int, duration time.Duration) (Warmup, error) {
	share := func(f float64) Warmup {
		if ops > 0 {
			return Warmup{Ops: int(float64(ops) * f)}
		}
		return Warmup{Duration: time.Duration(float64(duration) * f)}
	}
	s = strings.TrimSpace(s)
	switch {
	case s == "" || s == "auto":
		return share(DefaultWarmupShare), nil
	case strings.HasSuffix(s, "%"):
		p, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil || p < 0 {
			return Warmup{}, fmt.Errorf("bad warm-up %q: want a percentage like 10%%", s)
		}
		return share(p / 100), nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return Warmup{Ops: n}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return Warmup{Duration: d}, nil
	}
	return Warmup{}, fmt.Errorf("bad warm-up %q: want an operation count, a duration (2s) or a percentage (10%%)", s)
}

// Validate reports the first impossible setting.
func (c Config) Validate() error {
	switch {
	case c.Keys == nil:
		return errors.New("bench: no key distribution")
	case c.Records < 1:
		return fmt.Errorf("bench: records must be at least 1, got %d", c.Records)
	case c.Ops < 0 || (c.Ops == 0 && c.Duration <= 0):
		return errors.New("bench: give a positive operation count or duration")
	case c.ValueSize < 1:
		return fmt.Errorf("bench: value size must be at least 1 byte, got %d", c.ValueSize)
	case c.Concurrency < 1:
		return fmt.Errorf("bench: concurrency must be at least 1, got %d", c.Concurrency)
	case c.Rate < 0:
		return fmt.Errorf("bench: rate must not be negative, got %v", c.Rate)
	case c.Warmup.Ops < 0 || c.Warmup.Duration < 0:
		return errors.New("bench: warm-up must not be negative")
	}
	if tr, ok := c.Keys.(*workload.Trace); ok && tr.Records() != uint64(c.Records) {
		return fmt.Errorf("bench: the trace has %d records, the configuration %d", tr.Records(), c.Records)
	}
	return nil
}

// workloadName is the run's workload as reported: the mix's name, or
// "trace" when the key source's entries carry their own operations.
func (c Config) workloadName() string {
	if s, ok := c.Keys.(workload.Sequence); ok && s.HasOps() {
		return "trace"
	}
	return c.Mix.Name
}

// keySource describes the key distribution for Describe.
func keySource(d workload.Distribution) string {
	if x, ok := d.(interface{ Describe() string }); ok {
		return x.Describe()
	}
	return d.Name() + " keys"
}

// Describe is a one-line summary of the run, printed above its table.
func Describe(c Config) string {
	measure := fmt.Sprintf("%d ops", c.Ops)
	if c.Ops == 0 {
		measure = c.Duration.String()
	}
	loop := fmt.Sprintf("closed loop, %d workers", c.Concurrency)
	if c.Rate > 0 {
		loop = fmt.Sprintf("open loop at %g ops/s, at most %d outstanding", c.Rate, c.Concurrency)
	}
	backend := c.Backend
	if c.BackendLatency > 0 {
		backend += fmt.Sprintf(" +%v per round trip", c.BackendLatency)
	}
	return fmt.Sprintf("workload %s, %s, %d records of %d B; %s after %s warm-up; %s; backend %s; seed %d",
		c.workloadName(), keySource(c.Keys), c.Records, c.ValueSize, measure, c.Warmup, loop, backend, c.Seed)
}
