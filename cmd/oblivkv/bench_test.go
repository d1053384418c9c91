package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/bench"
	"github.com/oblivkv/oblivkv/bench/workload"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/resp"
)

// runBenchCmd runs `oblivkv bench args...` and returns its stdout.
func runBenchCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	cmd.SetContext(context.Background())
	err := cmd.Execute()
	return out.String(), err
}

// runBenchJSON runs `oblivkv bench args... --json FILE`, which must
// succeed, and returns the results decoded from FILE into a T, and stdout.
func runBenchJSON[T any](t *testing.T, args ...string) (T, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.json")
	out, err := runBenchCmd(t, append(args, "--json", path)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got T
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	return got, out
}

func TestBenchCommandInProcess(t *testing.T) {
	csvPath := filepath.Join(t.TempDir(), "r.csv")
	got, out := runBenchJSON[[]map[string]any](t, "--records", "500", "--ops", "2000", "--workload", "B",
		"--value-size", "64", "--concurrency", "4", "--csv", csvPath)
	if !strings.Contains(out, "workload B") || !strings.Contains(out, "vs plain") ||
		!strings.Contains(out, "encrypted") {
		t.Errorf("output:\n%s", out)
	}
	if len(got) != 2 || got[0]["protocol"] != "plain" || got[1]["protocol"] != "encrypted" ||
		got[0]["ops"] != 2000.0 || got[0]["backend"] != "mem" || got[0]["records"] != 500.0 {
		t.Errorf("JSON: %v", got)
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 3 {
		t.Errorf("CSV: %d rows, %v", len(rows), err)
	}
}

func TestBenchCommandDiskCleansUp(t *testing.T) {
	dir := t.TempDir()
	out, err := runBenchCmd(t, "--protocol", "encrypted", "--backend", "disk", "--data-dir", dir,
		"--records", "100", "--ops", "200", "--concurrency", "2", "--value-size", "32")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("data dir left with %v", entries)
	}
}

// TestBenchCommandOptions: an --opt goes to the protocols of the run that
// have such an option, and one that none has is refused.
func TestBenchCommandOptions(t *testing.T) {
	got, out := runBenchJSON[[]struct {
		Protocol string             `json:"protocol"`
		Extra    map[string]float64 `json:"extra"`
	}](t, "--protocols", "encrypted,treebeard", "--opt", "trees=2", "--opt", "epoch=100us",
		"--records", "100", "--ops", "300", "--concurrency", "4", "--value-size", "32")
	if !strings.Contains(out, "protocol options: treebeard Trees=2 Epoch=100µs") {
		t.Errorf("output:\n%s", out)
	}
	if len(got) != 2 || got[1].Protocol != "treebeard" || got[1].Extra["trees"] != 2 {
		t.Errorf("JSON: %+v", got)
	}
	for _, args := range [][]string{
		{"--protocols", "plain,encrypted", "--opt", "trees=2"},
		{"--protocol", "treebeard", "--opt", "trees=two"},
		{"--protocol", "treebeard", "--opt", "trees"},
		{"--addr", "127.0.0.1:1", "--opt", "trees=2"},
	} {
		if _, err := runBenchCmd(t, append(args, "--records", "10", "--ops", "10")...); err == nil {
			t.Errorf("bench %v accepted", args)
		}
	}
}

func TestBenchCommandRejects(t *testing.T) {
	for _, args := range [][]string{
		{"--ops", "10", "--duration", "1s"},
		{"--protocol", "plain", "--protocols", "plain,encrypted"},
		{"--addr", "127.0.0.1:1", "--protocols", "plain"},
		{"--addr", "127.0.0.1:1", "--backend", "disk"},
		{"--workload", "Z"},
		{"--distribution", "pareto"},
		{"--warmup", "soon"},
		{"--records", "0"},
		{"--protocols", " , "},
	} {
		if _, err := runBenchCmd(t, args...); err == nil {
			t.Errorf("bench %v accepted", args)
		}
	}
	if _, err := runBenchCmd(t, "--protocol", "nosuch", "--records", "10", "--ops", "10"); err == nil ||
		!strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown protocol: %v", err)
	}
}

func TestBenchCommandAgainstServer(t *testing.T) {
	store, err := kv.Open(context.Background(), kv.Config{Protocol: "encrypted", Backend: mem.New(),
		Keys: kvtest.NewKeys(t), Capacity: 1000, ValueSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := resp.NewServer(store, resp.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	out, err := runBenchCmd(t, "--addr", ln.Addr().String(), "--records", "200", "--ops", "500",
		"--value-size", "64", "--concurrency", "4", "--workload", "C")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "vs encrypted") || !strings.Contains(out, "resp://") {
		t.Errorf("output:\n%s", out)
	}
}

// TestBenchCommandTrace: --trace loads the file's distinct keys as the
// records and replays its operations.
func TestBenchCommandTrace(t *testing.T) {
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "trace.txt")
	trace := "# replayed\nuser:1 r\nuser:2,w\n\nuser:1 GET\nother put\nuser:3 read\n"
	if err := os.WriteFile(tracePath, []byte(trace), 0o600); err != nil {
		t.Fatal(err)
	}
	got, out := runBenchJSON[[]map[string]any](t, "--protocol", "plain", "--trace", tracePath, "--ops", "500",
		"--warmup", "0", "--concurrency", "3", "--value-size", "32")
	if !strings.Contains(out, "workload trace, trace trace.txt (5 entries over 4 keys, operations from the file), 4 records") {
		t.Errorf("output:\n%s", out)
	}
	// 500 entries: 100 rounds of 3 reads and 2 updates.
	if len(got) != 1 || got[0]["records"] != 4.0 || got[0]["reads"] != 300.0 || got[0]["updates"] != 200.0 ||
		got[0]["misses"] != 0.0 || got[0]["workload"] != "trace" || got[0]["distribution"] != "trace" {
		t.Errorf("JSON: %v", got)
	}
	// An explicit --records equal to the trace's is fine.
	if out, err := runBenchCmd(t, "--protocol", "plain", "--trace", tracePath, "--records", "4", "--ops", "20"); err != nil {
		t.Errorf("--records 4: %v\n%s", err, out)
	}
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("a r\nb r\n# c\nc frobnicate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noOps := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(noOps, []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", tracePath, "--distribution", "uniform"}, "not both"},
		{[]string{"--trace", tracePath, "--distribution", "zipfian"}, "not both"},
		{[]string{"--trace", tracePath, "--records", "10"}, "4 distinct keys"},
		{[]string{"--trace", tracePath, "--workload", "C"}, "leave --workload out"},
		{[]string{"--trace", noOps, "--temporal-s", "2"}, "--temporal-s"},
		{[]string{"--trace", bad}, "bad.txt: line 4: unknown operation"},
		{[]string{"--trace", filepath.Join(dir, "missing.txt")}, "missing.txt"},
	} {
		_, err := runBenchCmd(t, append(c.args, "--protocol", "plain", "--ops", "10")...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
	// A trace without operations takes them from --workload.
	out, err := runBenchCmd(t, "--protocol", "plain", "--trace", noOps, "--workload", "C", "--ops", "50")
	if err != nil || !strings.Contains(out, "workload C, trace keys.txt") {
		t.Errorf("trace without ops: %v\n%s", err, out)
	}
}

func TestBenchCommandTemporal(t *testing.T) {
	got, out := runBenchJSON[[]map[string]any](t, "--protocol", "plain", "--distribution", "temporal", "--temporal-s", "1.5",
		"--records", "300", "--ops", "1000", "--concurrency", "4", "--value-size", "32")
	if !strings.Contains(out, "temporal (Zipf s=1.5 reuse distances, 1100-entry sequence)") {
		t.Errorf("output:\n%s", out)
	}
	if len(got) != 1 || got[0]["distribution"] != "temporal" || got[0]["ops"] != 1000.0 || got[0]["misses"] != 0.0 {
		t.Errorf("JSON: %v", got)
	}
	for _, s := range []string{"0", "-1", "NaN", "Inf"} {
		_, err := runBenchCmd(t, "--distribution", "temporal", "--temporal-s", s, "--records", "10", "--ops", "10")
		if err == nil || !strings.Contains(err.Error(), "--temporal-s must be a positive finite number") {
			t.Errorf("--temporal-s %s: %v", s, err)
		}
	}
	if _, err := runBenchCmd(t, "--distribution", "uniform", "--temporal-s", "2", "--records", "10", "--ops", "10"); err == nil {
		t.Error("--temporal-s accepted with --distribution uniform")
	}
}

func TestSequenceLength(t *testing.T) {
	for _, c := range []struct {
		ops  int
		warm bench.Warmup
		rate float64
		dur  time.Duration
		want int
	}{
		{1000, bench.Warmup{Ops: 100}, 0, 0, 1100},
		{0, bench.Warmup{Duration: time.Second}, 0, 10 * time.Second, workload.DefaultTraceLength},
		{0, bench.Warmup{}, 1000, 10 * time.Second, 11000},
		{1000, bench.Warmup{Duration: time.Second}, 0, 0, workload.DefaultTraceLength},
		{1 << 30, bench.Warmup{}, 0, 0, workload.MaxTraceLength},
	} {
		if got := sequenceLength(c.ops, c.warm, c.rate, c.dur); got != c.want {
			t.Errorf("sequenceLength(%d, %v, %v, %v) = %d, want %d", c.ops, c.warm, c.rate, c.dur, got, c.want)
		}
	}
}
