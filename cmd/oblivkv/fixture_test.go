package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/bench"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/auditrun"
	"github.com/oblivkv/oblivkv/kv/kvtest/fixture"
)

// The fixture protocol (kv/kvtest/fixture) is registered by this import
// alone, in this test binary and in the commands it runs as the oblivkv
// binary (TestMain): nothing else in the command knows of it.

// TestFixtureServed: `oblivkv serve --protocol fixture` answers a RESP
// client, and INFO names the protocol.
func TestFixtureServed(t *testing.T) {
	ctx := context.Background()
	s := startServe(t, t.TempDir(), "--protocol", fixture.Name, "--capacity", "16")
	c := client(t, s.addr)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	if info, err := c.Info(ctx, "oblivkv").Result(); err != nil || !strings.Contains(info, "protocol:"+fixture.Name+"\r\n") {
		t.Fatalf("INFO oblivkv = %q, %v; want protocol %s", info, err, fixture.Name)
	}
	s.stop(t)
}

// TestFixtureBenchmarked: `bench --compare` runs the fixture beside the
// plain baseline and reports both.
func TestFixtureBenchmarked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	if out, err := runBenchCmd(t, "--compare", "--out", dir, "--protocols", "plain,"+fixture.Name,
		"--records", "32", "--ops", "200", "--concurrency", "4", "--value-size", "64"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f, err := os.Open(filepath.Join(dir, bench.ReportCSV))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, row := range rows[1:] {
		names = append(names, row[slices.Index(rows[0], "protocol")])
		if errs := row[slices.Index(rows[0], "errors")]; errs != "0" {
			t.Errorf("%s: %s errors", row[0], errs)
		}
	}
	if !slices.Equal(names, []string{"plain", fixture.Name}) {
		t.Fatalf("the comparison has rows %v, want plain and %s", names, fixture.Name)
	}
}

// TestFixtureAudited: `oblivkv audit --protocol fixture` runs the
// fixture's registered check on every workload beside the generic ones,
// and every check passes.
func TestFixtureAudited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.json")
	cmd := newAuditCmd()
	cmd.SetOut(io.Discard)
	cmd.SetArgs([]string{"--protocol", fixture.Name, "--records", "64", "--json", path})
	cmd.SetContext(context.Background())
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res auditrun.JSONResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Pass || res.Protocol != fixture.Name {
		t.Fatalf("audit of %s: pass %v", res.Protocol, res.Pass)
	}
	for _, w := range res.Workloads {
		name := w + ": every access reads and rewrites every slot"
		if !slices.ContainsFunc(res.Checks, func(c auditrun.JSONCheck) bool { return c.Name == name && c.Pass }) {
			t.Errorf("no passing check %q among %d", name, len(res.Checks))
		}
	}
}
