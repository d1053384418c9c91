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

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
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

func TestBenchCommandInProcess(t *testing.T) {
	dir := t.TempDir()
	jsonPath, csvPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.csv")
	out, err := runBenchCmd(t, "--records", "500", "--ops", "2000", "--workload", "B",
		"--value-size", "64", "--concurrency", "4", "--json", jsonPath, "--csv", csvPath)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "workload B") || !strings.Contains(out, "vs plain") ||
		!strings.Contains(out, "encrypted") {
		t.Errorf("output:\n%s", out)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
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
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	out, err := runBenchCmd(t, "--protocols", "encrypted,treebeard", "--opt", "trees=2", "--opt", "epoch=100us",
		"--records", "100", "--ops", "300", "--concurrency", "4", "--value-size", "32", "--json", jsonPath)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "protocol options: treebeard Trees=2 Epoch=100µs") {
		t.Errorf("output:\n%s", out)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Protocol string             `json:"protocol"`
		Extra    map[string]float64 `json:"extra"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
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
