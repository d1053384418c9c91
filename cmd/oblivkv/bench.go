package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/oblivkv/oblivkv/bench"
	"github.com/oblivkv/oblivkv/bench/workload"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/options"
)

// benchFlags are the flags of `oblivkv bench`.
type benchFlags struct {
	protocols, protocol   string
	workload, dist        string
	records, ops          int
	duration              time.Duration
	warmup                string
	valueSize, workers    int
	rate                  float64
	backend, dataDir      string
	fsync                 fsyncPolicy
	latency               time.Duration
	addr, jsonOut, csvOut string
	seed                  uint64
	capacity              int
	opts                  []string
	trace                 string
	temporalS             float64
	compare               bool
	out                   string
	cpuProfile            string
	disk                  diskFlags
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark protocols on a YCSB workload, in one run, and report their costs",
		Long: `Benchmark one or more protocols on the same YCSB workload, one after another
in one run, so their figures compare as ratios measured on the same machine at
the same time.

For each protocol bench opens a fresh store (by default in memory: --backend
mem, unlike serve), loads --records records through the protocol's bulk loader,
runs a warm-up whose figures are discarded, then measures --ops operations (or
--duration). The store and everything it wrote are then discarded.

Workloads (YCSB core): A 50% read / 50% update; B 95% read / 5% update;
C 100% read; F 50% read / 50% read-modify-write.
Distributions: uniform; zipfian (YCSB's scrambled zipfian, theta 0.99);
latest (the last-loaded records are hottest); hotspot (20% of the records get
80% of the operations); temporal (Cloak's synthetic trace: each access goes
to the record whose reuse distance, its position in the LRU stack with 1 the
most recent, is drawn from Zipf with exponent --temporal-s, default 1).

--trace FILE replays a trace instead: one key per line, optionally followed
by whitespace or a comma and an operation (r, read, get; w, write, set,
update, put); blank lines and # comments are skipped. The file's distinct
keys are the records (loaded, in order of first appearance; --records comes
from the file), and with an operation column the file's operations replace
--workload. --trace excludes --distribution.

temporal and --trace are one sequence per run: all workers take its entries
in order from one shared cursor (warm-up first), wrapping at its end, and
every protocol replays it from the start.

--concurrency workers each keep one operation outstanding (closed loop);
with --rate, operations are instead scheduled at that fixed rate (open loop),
--concurrency bounds those outstanding, and latency counts from when each
operation was due, so queueing behind a slow one is not hidden.

With --addr, bench drives a running RESP server (oblivkv serve, or Redis)
instead: its protocol is the server's, and backend figures come from the
server's INFO when it reports them. --addr a,b,c spreads the calls over
several servers of one store in turn (backend figures from the first).

Reports: a table on stdout; --json FILE and --csv FILE with every figure.
--out DIR also writes a comparison into DIR: the table as Markdown
(results.md) and CSV (results.csv), SVG bar charts of throughput, p99
latency, backend bytes per operation and the protocols' stash and cache
high-water marks, and index.md linking them. --compare runs every registered
protocol (the insecure baselines first) unless --protocols or
--protocol narrows it, and needs --out.
The table has a util column (batch utilisation: the share of batch slots
that carried real requests) when a protocol of the run reports it.
See docs/benchmarks.md for what each figure means.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, f) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.protocols, "protocols", strings.Join(baselines(), ","), "comma-separated protocols to run one after another")
	fs.StringVar(&f.protocol, "protocol", "", "a single protocol (same as --protocols NAME)")
	fs.StringVar(&f.workload, "workload", "A", "YCSB workload: "+strings.Join(workload.Mixes(), ", "))
	fs.StringVar(&f.dist, "distribution", "zipfian", "key distribution: "+strings.Join(workload.Distributions(), ", "))
	fs.Float64Var(&f.temporalS, "temporal-s", workload.DefaultTemporalExponent, "Zipf exponent of the reuse distances of --distribution temporal (> 0)")
	fs.StringVar(&f.trace, "trace", "", "replay this trace file (one key per line, optional op column) instead of a --distribution")
	fs.IntVar(&f.records, "records", 100000, "records loaded before the run (with --trace: the file's distinct keys)")
	fs.IntVar(&f.ops, "ops", 200000, "operations measured (excluding warm-up)")
	fs.DurationVar(&f.duration, "duration", 0, "measure for this long instead of --ops operations")
	fs.StringVar(&f.warmup, "warmup", "auto", "warm-up, excluded from the figures: operations (5000), a duration (2s), a share of the run (10%) or 0; auto is 10%")
	fs.IntVar(&f.valueSize, "value-size", 1024, "bytes per value (also the store's value size)")
	fs.IntVar(&f.workers, "concurrency", 64, "workers (closed loop), or most operations outstanding (open loop)")
	fs.Float64Var(&f.rate, "rate", 0, "open loop at this many operations per second (0: closed loop)")
	fs.StringVar(&f.backend, "backend", "mem", "untrusted storage: mem (default for bench), disk, redis://HOST:PORT[/DB] or rediss://... (see serve --help)")
	fs.DurationVar(&f.latency, "backend-latency", 0, "delay added to every backend round trip, to emulate a WAN (e.g. 10ms)")
	fs.StringVar(&f.dataDir, "data-dir", "", "where the disk backend keeps its runs (default: a temporary directory); removed afterwards")
	registerFsync(cmd, &f.fsync)
	f.disk.register(cmd)
	fs.StringVar(&f.addr, "addr", "", "benchmark the RESP server at HOST:PORT (or several, comma-separated: the routers of one store) instead of an in-process store")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results to this file as JSON")
	fs.StringVar(&f.csvOut, "csv", "", "also write the results to this file as CSV")
	fs.BoolVar(&f.compare, "compare", false, "run every registered protocol (unless --protocols narrows it) and write a comparison to --out")
	fs.StringVar(&f.out, "out", "", "write a comparison (Markdown and CSV table, SVG plots, index.md) into this directory")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the operation, key and value streams (the same for every protocol)")
	fs.IntVar(&f.capacity, "capacity", 0, "keys each store can hold (default: --records)")
	registerOpt(cmd, &f.opts, "; each goes to the protocols of the run that have it")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (loading included) to `FILE`, for go tool pprof")
	return cmd
}

func runBench(cmd *cobra.Command, f benchFlags) error {
	protocols, err := f.protocolList(cmd)
	if err != nil {
		return err
	}
	cfg, err := f.config(cmd)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	given, err := options.ParseEach(protocols, f.opts)
	if err != nil {
		return err
	}
	open, cleanup, err := f.opener(given, cfg.Records)
	if err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return errors.Join(err, cleanup())
	}
	defer stopProfile()
	fmt.Fprintln(cmd.OutOrStdout(), bench.Describe(cfg))
	if len(f.opts) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "protocol options: %s\n", describeOptions(protocols, given))
	}
	results, runErr := bench.Run(ctx, cfg, protocols, open)
	err = errors.Join(runErr, cleanup(), report(cmd.OutOrStdout(), f, results))
	if f.out != "" && len(results) > 0 {
		err = errors.Join(err, bench.WriteReport(f.out, reportInfo(cmd, cfg, f.opts), results))
	}
	return errors.Join(err, failures(results))
}

// reportInfo describes the run for --out's pages: the command line (the
// flags given, in flag order), the run's settings and the machine.
func reportInfo(cmd *cobra.Command, cfg bench.Config, opts []string) bench.ReportInfo {
	line := []string{"oblivkv", "bench"}
	for _, fl := range collect(cmd.Flags().Visit) {
		switch {
		case fl.Name == "opt":
			for _, o := range opts {
				line = append(line, "--opt", o)
			}
		case fl.Value.Type() == "bool":
			line = append(line, "--"+fl.Name)
		default:
			line = append(line, "--"+fl.Name, fl.Value.String())
		}
	}
	machine := fmt.Sprintf("%s/%s, %d CPUs, %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(),
		runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	return bench.ReportInfo{Command: strings.Join(line, " "), Run: bench.Describe(cfg), Machine: machine}
}

// collect returns what visit passes to its function: with a flag set's
// Visit, the flags given on the command line (pflag's type is inferred,
// so this package needs no import of pflag).
func collect[T any](visit func(func(T))) []T {
	var out []T
	visit(func(t T) { out = append(out, t) })
	return out
}

// describeOptions names the protocols given options and each one's
// Options, non-zero fields only (zero means the protocol's default).
func describeOptions(protocols []string, given map[string]any) string {
	var parts []string
	for _, p := range protocols {
		if o, ok := given[p]; ok {
			parts = append(parts, p+" "+options.Format(o))
		}
	}
	return strings.Join(parts, "; ")
}

// protocolList reads --protocols or --protocol.
func (f benchFlags) protocolList(cmd *cobra.Command) ([]string, error) {
	fs := cmd.Flags()
	if fs.Changed("protocol") && fs.Changed("protocols") {
		return nil, errors.New("give --protocol or --protocols, not both")
	}
	if f.compare && f.out == "" {
		return nil, errors.New("--compare writes its comparison into a directory: give --out DIR")
	}
	if f.addr != "" {
		for _, name := range []string{"protocol", "protocols", "backend", "backend-latency", "data-dir", "capacity", "opt", "compare"} {
			if fs.Changed(name) {
				return nil, fmt.Errorf("--%s does not apply with --addr: the server has its own", name)
			}
		}
		return []string{"remote"}, nil
	}
	list := f.protocols
	switch {
	case fs.Changed("protocol"):
		list = f.protocol
	case f.compare && !fs.Changed("protocols"):
		return compareOrder(kv.Protocols()), nil
	}
	var out []string
	for p := range strings.SplitSeq(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no protocol to run")
	}
	return out, nil
}

// compareOrder orders names as --compare runs them: the protocols that
// hide least first (kv.Protocol.Hides: the insecure baselines, the first
// of them the reference of the ratio column), each kind in the order of
// names.
func compareOrder(names []string) []string {
	out := slices.Clone(names)
	slices.SortStableFunc(out, func(a, b string) int { return cmp.Compare(hides(b), hides(a)) })
	return out
}

// baselines are the insecure baselines, in the order --compare runs them:
// what bench runs by default.
func baselines() []string {
	return slices.DeleteFunc(compareOrder(kv.Protocols()), func(name string) bool { return hides(name) == kv.HidesAccesses })
}

// hides is what the protocol registered as name hides.
func hides(name string) kv.Hides {
	p, _ := kv.Lookup(name)
	return p.Hides
}

// config builds the benchmark configuration from the flags.
func (f benchFlags) config(cmd *cobra.Command) (bench.Config, error) {
	ops := f.ops
	if cmd.Flags().Changed("duration") {
		if cmd.Flags().Changed("ops") {
			return bench.Config{}, errors.New("give --ops or --duration, not both")
		}
		ops = 0
	}
	mix, err := workload.MixByName(f.workload)
	if err != nil {
		return bench.Config{}, err
	}
	if f.records < 1 {
		return bench.Config{}, fmt.Errorf("--records must be at least 1, got %d", f.records)
	}
	warm, err := bench.ParseWarmup(f.warmup, ops, f.duration)
	if err != nil {
		return bench.Config{}, err
	}
	keys, records, err := f.keySource(cmd, ops, warm)
	if err != nil {
		return bench.Config{}, err
	}
	cfg := bench.Config{Mix: mix, Keys: keys, Records: records, Ops: ops, Duration: f.duration,
		Warmup: warm, ValueSize: f.valueSize, Concurrency: f.workers, Rate: f.rate, Seed: f.seed,
		Backend: f.backend, BackendLatency: f.latency}
	if f.addr != "" {
		cfg.Backend, cfg.BackendLatency = "resp://"+f.addr, 0
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		cfg.Progress = os.Stderr
	}
	return cfg, cfg.Validate()
}

// keySource builds the run's key source and its number of records: a
// trace file (--trace), or the --distribution over --records.
func (f benchFlags) keySource(cmd *cobra.Command, ops int, warm bench.Warmup) (workload.Distribution, int, error) {
	fs := cmd.Flags()
	temporal := strings.EqualFold(f.dist, "temporal")
	if fs.Changed("temporal-s") && (f.trace != "" || !temporal) {
		return nil, 0, errors.New("--temporal-s applies to --distribution temporal only")
	}
	if f.trace != "" {
		if fs.Changed("distribution") {
			return nil, 0, errors.New("give --trace or --distribution, not both: a trace is its own key distribution")
		}
		tr, err := workload.ReadTrace(f.trace)
		if err != nil {
			return nil, 0, fmt.Errorf("--trace: %w", err)
		}
		if fs.Changed("records") && uint64(f.records) != tr.Records() {
			return nil, 0, fmt.Errorf("--records %d, but the trace has %d distinct keys: with --trace the records are the trace's keys, leave --records out",
				f.records, tr.Records())
		}
		if tr.HasOps() && fs.Changed("workload") {
			return nil, 0, errors.New("the trace gives its own operations: leave --workload out (or drop the trace's operation column)")
		}
		return tr, int(tr.Records()), nil
	}
	opts := workload.Options{Seed: f.seed}
	if temporal {
		if !(f.temporalS > 0) || math.IsInf(f.temporalS, 0) {
			return nil, 0, fmt.Errorf("--temporal-s must be a positive finite number, got %v", f.temporalS)
		}
		opts.TemporalExponent = f.temporalS
		opts.TraceLength = sequenceLength(ops, warm, f.rate, f.duration)
	}
	keys, err := workload.New(f.dist, uint64(f.records), opts)
	return keys, f.records, err
}

// sequenceLength is how many entries the temporal generator draws: the
// run's warm-up and measured operations when they are counts; when a phase
// is timed, what an open loop's rate needs over it, or else
// workload.DefaultTraceLength; at most workload.MaxTraceLength (a longer
// run wraps).
func sequenceLength(ops int, warm bench.Warmup, rate float64, duration time.Duration) int {
	n := ops + warm.Ops
	timed := duration + warm.Duration
	switch {
	case timed > 0 && rate > 0:
		n += int(math.Ceil(rate * timed.Seconds() * 1.1)) // an open loop may run a little over
	case timed > 0:
		n = max(n, workload.DefaultTraceLength)
	}
	return min(max(n, 1), workload.MaxTraceLength)
}

// opener returns how each protocol's target is opened (with its Options
// from options, if any, and room for records keys unless --capacity says
// otherwise), and what removes what the run left behind once every
// protocol is done.
func (f benchFlags) opener(options map[string]any, records int) (bench.Opener, func() error, error) {
	if f.addr != "" {
		return func(ctx context.Context, _ string) (bench.Target, error) {
			return bench.DialRESP(ctx, strings.Split(f.addr, ","), f.workers)
		}, func() error { return nil }, nil
	}
	runID, err := randomID()
	if err != nil {
		return nil, nil, err
	}
	root, cleanup, err := f.runDir(runID)
	if err != nil {
		return nil, nil, err
	}
	capacity := f.capacity
	if capacity <= 0 {
		capacity = records
	}
	open := func(ctx context.Context, protocol string) (bench.Target, error) {
		dir := ""
		if root != "" {
			dir = filepath.Join(root, protocol)
		}
		opened, err := setup.Open(ctx, setup.Options{Protocol: protocol, Backend: f.backend,
			DataDir: dir, BackendLatency: f.latency, Capacity: capacity, ValueSize: f.valueSize,
			Prefix: "bench/" + runID + "/" + protocol + "/", EphemeralKey: true, ProtocolOptions: options[protocol],
			NoFsync: f.fsync.none, DiskCache: f.disk.cache.bytes(), DiskEngine: string(f.disk.engine)})
		if err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
		return bench.StoreTarget(opened.Store, func(ctx context.Context) error {
			if dir != "" { // the run's own directory: removing it discards the data
				return errors.Join(opened.Close(), os.RemoveAll(dir))
			}
			return opened.Discard(ctx) // shared storage: delete the run's prefix
		}), nil
	}
	return open, cleanup, nil
}

// runDir is the directory under which each protocol gets its own data
// directory, for the disk backend only: inside --data-dir, or a new
// temporary directory. The returned function removes it.
func (f benchFlags) runDir(runID string) (string, func() error, error) {
	switch {
	case f.backend != "disk":
		return "", func() error { return nil }, nil
	case f.dataDir == "":
		dir, err := os.MkdirTemp("", "oblivkv-bench-")
		if err != nil {
			return "", nil, err
		}
		return dir, func() error { return os.RemoveAll(dir) }, nil
	}
	dir := filepath.Join(f.dataDir, "bench-"+runID)
	return dir, func() error { return os.RemoveAll(dir) }, nil
}

func randomID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// report writes the table to out and the requested files.
func report(out io.Writer, f benchFlags, results []bench.Result) error {
	if len(results) == 0 {
		return nil
	}
	err := bench.WriteTable(out, results)
	if f.jsonOut != "" {
		err = errors.Join(err, writeFile(f.jsonOut, results, bench.WriteJSON))
	}
	if f.csvOut != "" {
		err = errors.Join(err, writeFile(f.csvOut, results, bench.WriteCSV))
	}
	return err
}

func writeFile(path string, results []bench.Result, write func(io.Writer, []bench.Result) error) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(write(file, results), file.Close())
}

// failures turns failed operations into an error (and a non-zero exit):
// figures with errors in them are not to be trusted.
func failures(results []bench.Result) error {
	var errs []error
	for _, r := range results {
		if r.Errors > 0 {
			errs = append(errs, fmt.Errorf("%s: %d operations failed (first: %s)", r.Protocol, r.Errors, r.FirstError))
		}
	}
	return errors.Join(errs...)
}
