package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
)

var required = []string{"protocol", "ops_per_sec", "p50_ms", "p99_ms", "backend_round_trips_per_op",
	"backend_bytes_per_op", "amplification", "workload", "distribution", "records", "ops",
	"concurrency", "value_size", "backend", "backend_latency_ms", "duration_s"}

func sampleResults(t *testing.T) []Result {
	t.Helper()
	cfg := config(t, "A", "zipfian", 200, 400)
	res, err := Run(context.Background(), cfg, []string{"plain", "encrypted"}, memOpener(t))
	if err != nil {
		t.Fatal(err)
	}
	res[1].Extra = []kv.Stat{{Name: "stash_max", Value: 3}, {Name: "cache", Value: 1.5}}
	// A target without backend counters.
	res = append(res, Result{Protocol: "remote", OpsPerSec: 10})
	return res
}

func TestJSONParsesBack(t *testing.T) {
	res := sampleResults(t)
	var buf bytes.Buffer
	if err := WriteJSON(&buf, res); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if len(got) != 3 {
		t.Fatalf("%d objects, want 3", len(got))
	}
	for i, obj := range got {
		for _, f := range required {
			if _, ok := obj[f]; !ok {
				t.Errorf("object %d lacks %q", i, f)
			}
		}
	}
	if got[0]["protocol"] != "plain" || got[0]["ops"].(float64) != 400 || got[0]["workload"] != "A" {
		t.Errorf("first object %v", got[0])
	}
	if amp, ok := got[1]["amplification"].(float64); !ok || amp <= 1 {
		t.Errorf("encrypted amplification %v", got[1]["amplification"])
	}
	if extra := got[1]["extra"].(map[string]any); extra["stash_max"] != 3.0 {
		t.Errorf("extra %v", extra)
	}
	if got[2]["amplification"] != nil || got[2]["backend_round_trips_per_op"] != nil {
		t.Errorf("unknown backend figures not null: %v", got[2])
	}
}

func TestCSVParsesBack(t *testing.T) {
	res := sampleResults(t)
	var buf bytes.Buffer
	if err := WriteCSV(&buf, res); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want header + 3", len(rows))
	}
	header := rows[0]
	col := func(name string) int {
		i := slices.Index(header, name)
		if i < 0 {
			t.Fatalf("no column %q in %v", name, header)
		}
		return i
	}
	for _, f := range required {
		col(f)
	}
	if rows[1][col("protocol")] != "plain" || rows[1][col("ops")] != "400" {
		t.Errorf("plain row %v", rows[1])
	}
	if rows[2][col("extra")] != "stash_max=3;cache=1.5" {
		t.Errorf("extra cell %q", rows[2][col("extra")])
	}
	if rows[3][col("amplification")] != "" || rows[1][col("amplification")] == "" {
		t.Errorf("amplification cells %q and %q", rows[1][col("amplification")], rows[3][col("amplification")])
	}
}

func TestTable(t *testing.T) {
	res := sampleResults(t)
	res[1].OpsPerSec = res[0].OpsPerSec / 2
	var buf bytes.Buffer
	if err := WriteTable(&buf, res); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "vs plain") {
		t.Fatalf("table:\n%s", buf.String())
	}
	if !strings.Contains(lines[1], "1.00x") || !strings.Contains(lines[2], "0.50x") {
		t.Errorf("ratio column wrong:\n%s", buf.String())
	}
	if f := strings.Fields(lines[3]); f[len(f)-2] != "-" || f[len(f)-4] != "-" {
		t.Errorf("unknown figures not shown as -: %q", lines[3])
	}
	// Aligned: every line as wide as the header.
	for _, l := range lines[1:] {
		if len(l) != len(lines[0]) {
			t.Errorf("unaligned:\n%s", buf.String())
			break
		}
	}
}

func TestLatencyFormat(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.000421: "0.000421", 0.1344: "0.134",
		12.34: "12.3", 250.4: "250", 0.0000001: "0.000000"} {
		if got := latency(v); got != want {
			t.Errorf("latency(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestTableUtilColumn: the util column appears only when some protocol
// reports batch utilisation, and shows "-" for the others.
func TestTableUtilColumn(t *testing.T) {
	res := []Result{
		{Protocol: "plain", OpsPerSec: 100, Extra: []kv.Stat{{Name: "stash_max", Value: 3}}},
		{Protocol: "batcher", OpsPerSec: 50},
	}
	table := func() []string {
		var buf bytes.Buffer
		if err := WriteTable(&buf, res); err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	}
	if lines := table(); strings.Contains(lines[0], "util") {
		t.Errorf("util column without any utilisation:\n%s", strings.Join(lines, "\n"))
	}
	res[1].Extra = []kv.Stat{{Name: "batches", Value: 9}, {Name: utilisationStat, Value: 0.7349}}
	lines := table()
	header := strings.Fields(lines[0])
	col := slices.Index(header, "util")
	if col < 0 || header[col-1] != "ampl" || header[col+1] != "errors" {
		t.Fatalf("no util column between ampl and errors:\n%s", strings.Join(lines, "\n"))
	}
	// "vs plain" and "p50 ms"... are two words in the header: count from the end.
	fromEnd := len(header) - col
	plain, batcher := strings.Fields(lines[1]), strings.Fields(lines[2])
	if got := plain[len(plain)-fromEnd]; got != "-" {
		t.Errorf("plain's util %q, want -", got)
	}
	if got := batcher[len(batcher)-fromEnd]; got != "0.73" {
		t.Errorf("batcher's util %q, want 0.73", got)
	}
	for _, l := range lines[1:] {
		if len(l) != len(lines[0]) {
			t.Errorf("unaligned:\n%s", strings.Join(lines, "\n"))
			break
		}
	}
}

// The journal figures are the growth of the store's journal counters over
// the measured phase, per operation and per second; a store without a
// journal has none, and the table shows their columns only when some
// result has them.
func TestJournalFigures(t *testing.T) {
	r := Result{Protocol: "treebeard", Ops: 1000, Duration: 2}
	r.setJournal([]kv.Stat{{Name: "journal_bytes", Value: 5000}, {Name: "journal_fsyncs", Value: 10}},
		[]kv.Stat{{Name: "journal_bytes", Value: 805000}, {Name: "journal_fsyncs", Value: 410}})
	if r.JournalBytesPerOp == nil || *r.JournalBytesPerOp != 800 || r.JournalFsyncsPerSec == nil || *r.JournalFsyncsPerSec != 200 {
		t.Fatalf("journal figures %v B/op, %v fsyncs/s; want 800 and 200", r.JournalBytesPerOp, r.JournalFsyncsPerSec)
	}
	plain := Result{Protocol: "plain", Ops: 1000, Duration: 2}
	plain.setJournal(nil, nil)
	if plain.JournalBytesPerOp != nil || plain.JournalFsyncsPerSec != nil {
		t.Fatal("journal figures without a journal")
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, []Result{plain}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "fsync/s") {
		t.Errorf("journal columns without a journal:\n%s", buf.String())
	}
	buf.Reset()
	if err := WriteTable(&buf, []Result{plain, r}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if !strings.Contains(lines[0], "jrnl B/op") || !strings.Contains(lines[2], " 800 ") || !strings.Contains(lines[2], " 200 ") {
		t.Errorf("table lacks treebeard's journal figures:\n%s", buf.String())
	}
}
