package bench

import (
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
)

// Result is one protocol's figures over the measured phase. Per-operation
// figures divide by Ops, the YCSB operations that succeeded (a
// read-modify-write is one operation made of a Get and a Put).
//
// LogicalBytes, the logical payload, is the value bytes the application
// asked to move: the bytes of every value returned by a Get that found its
// key, plus the bytes of every value written by a Put. Keys, misses and
// protocol framing do not count. Amplification is backend bytes (read plus
// written) over LogicalBytes: 1 for a store that moves exactly the values,
// more for sealing overhead, padding, dummy and path accesses.
//
// Backend figures are deltas of the target's counters over the measured
// phase; they are nil (JSON null, "-" in tables) when the target cannot
// report them.
type Result struct {
	Protocol       string  `json:"protocol"`
	Workload       string  `json:"workload"`
	Distribution   string  `json:"distribution"`
	Records        int     `json:"records"`
	Concurrency    int     `json:"concurrency"`
	Rate           float64 `json:"rate"` // target ops/s of an open loop, 0 for a closed loop
	ValueSize      int     `json:"value_size"`
	Backend        string  `json:"backend"`
	BackendLatency float64 `json:"backend_latency_ms"`
	Seed           uint64  `json:"seed"`
	Warmup         string  `json:"warmup"`
	LoadSeconds    float64 `json:"load_s"`

	Ops       uint64  `json:"ops"`
	Duration  float64 `json:"duration_s"`
	OpsPerSec float64 `json:"ops_per_sec"`
	MeanMS    float64 `json:"mean_ms"`
	P50MS     float64 `json:"p50_ms"`
	P95MS     float64 `json:"p95_ms"`
	P99MS     float64 `json:"p99_ms"`
	MaxMS     float64 `json:"max_ms"`

	Reads           uint64 `json:"reads"`
	Updates         uint64 `json:"updates"`
	ReadModifyWrite uint64 `json:"read_modify_writes"`
	Misses          uint64 `json:"misses"`
	Errors          uint64 `json:"errors"`
	FirstError      string `json:"first_error,omitempty"`

	LogicalBytes      uint64   `json:"logical_payload_bytes"`
	BackendRoundTrips *uint64  `json:"backend_round_trips"`
	BackendBytes      *uint64  `json:"backend_bytes"`
	RoundTripsPerOp   *float64 `json:"backend_round_trips_per_op"`
	BytesPerOp        *float64 `json:"backend_bytes_per_op"`
	Amplification     *float64 `json:"amplification"`

	// Journal figures over the measured phase, nil when the store keeps
	// no journal (the mem backend, or a protocol without trusted state):
	// bytes appended to the journal per operation, and its fsyncs per
	// second (0 with --fsync none).
	JournalBytesPerOp   *float64 `json:"journal_bytes_per_op"`
	JournalFsyncsPerSec *float64 `json:"journal_fsyncs_per_sec"`

	// Extra holds the protocol's own counters at the end of the run
	// (stash high-water marks, cache sizes...), in the protocol's order.
	Extra []kv.Stat `json:"-"`
}

func newResult(cfg Config, protocol string, m measured, before, after Snapshot) Result {
	if after.Protocol != "" {
		protocol = after.Protocol
	}
	r := Result{
		Protocol: protocol, Workload: cfg.workloadName(), Distribution: cfg.Keys.Name(),
		Records: cfg.Records, Concurrency: cfg.Concurrency, Rate: cfg.Rate,
		ValueSize: cfg.ValueSize, Backend: cfg.Backend, BackendLatency: nsToMS(int64(cfg.BackendLatency)),
		Seed: cfg.Seed, Warmup: cfg.Warmup.String(),
		Ops: m.ops, Duration: m.elapsed.Seconds(),
		MeanMS: m.lat.Mean() / 1e6, P50MS: nsToMS(m.lat.Quantile(0.50)),
		P95MS: nsToMS(m.lat.Quantile(0.95)), P99MS: nsToMS(m.lat.Quantile(0.99)),
		MaxMS: nsToMS(m.lat.Max()),
		Reads: m.reads, Updates: m.updates, ReadModifyWrite: m.rmws,
		Misses: m.misses, Errors: m.errors, LogicalBytes: m.payload, Extra: after.Extra,
	}
	if m.firstErr != nil {
		r.FirstError = m.firstErr.Error()
	}
	if m.elapsed > 0 {
		r.OpsPerSec = float64(m.ops) / m.elapsed.Seconds()
	}
	if before.Backend != nil && after.Backend != nil {
		r.setBackend(after.Backend.Sub(*before.Backend))
	}
	r.setJournal(before.Extra, after.Extra)
	return r
}

// setJournal sets the journal figures from the stores' journal counters
// (kv.Stats.Extra) before and after the measured phase.
func (r *Result) setJournal(before, after []kv.Stat) {
	bytes, okB := delta(before, after, "journal_bytes")
	fsyncs, okF := delta(before, after, "journal_fsyncs")
	if !okB || !okF || r.Ops == 0 || r.Duration <= 0 {
		return
	}
	perOp, perSec := bytes/float64(r.Ops), fsyncs/r.Duration
	r.JournalBytesPerOp, r.JournalFsyncsPerSec = &perOp, &perSec
}

// delta returns how much the counter called name grew from before to
// after, and false when either lacks it.
func delta(before, after []kv.Stat, name string) (float64, bool) {
	b, okB := statNamed(before, name)
	a, okA := statNamed(after, name)
	return a - b, okA && okB
}

func statNamed(stats []kv.Stat, name string) (float64, bool) {
	for _, s := range stats {
		if s.Name == name {
			return s.Value, true
		}
	}
	return 0, false
}

func (r *Result) setBackend(d observe.Counters) {
	calls, bytes := d.Calls, d.Bytes()
	r.BackendRoundTrips, r.BackendBytes = &calls, &bytes
	if r.Ops > 0 {
		r.RoundTripsPerOp = ratio(calls, r.Ops)
		r.BytesPerOp = ratio(bytes, r.Ops)
	}
	if r.LogicalBytes > 0 {
		r.Amplification = ratio(bytes, r.LogicalBytes)
	}
}

func ratio(a, b uint64) *float64 {
	f := float64(a) / float64(b)
	return &f
}

func nsToMS(ns int64) float64 { return float64(ns) / 1e6 }
