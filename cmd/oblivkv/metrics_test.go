package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestServeMetrics runs `serve --metrics-addr` (the default protocol, with
// its journal fsyncing every write), drives SETs, GETs and DELs through a
// Redis client, scrapes /metrics over HTTP and checks that every counter
// moved by exactly what the traffic did: store operations and commands by
// type, a latency observation per command, and backend round trips, bytes
// and journal fsyncs equal to what INFO reports.
func TestServeMetrics(t *testing.T) {
	dir := t.TempDir()
	maddr := freeAddr(t)
	s := startServe(t, dir, "--capacity", "1024", "--opt", "epoch=500us", "--metrics-addr", maddr, "--disk-engine", "pebble", "--disk-cache", "16")
	if !waitServing(s) || !strings.Contains(s.stderr.String(), "metrics=http://"+maddr+"/metrics") {
		t.Errorf("metrics address not logged: %s", s.stderr)
	}
	ctx := context.Background()
	c := client(t, s.addr)
	const sets, gets, dels, incrs = 7, 5, 3, 4
	for i := range sets {
		if err := c.Set(ctx, fmt.Sprintf("k%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range gets {
		if err := c.Get(ctx, fmt.Sprintf("k%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range dels {
		if err := c.Del(ctx, fmt.Sprintf("k%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range incrs {
		if err := c.Incr(ctx, "counter").Err(); err != nil {
			t.Fatal(err)
		}
	}

	fams, info := quietScrape(t, c, maddr)
	m := metricsOf{t, fams}
	// An INCR is one write (a kv mutation).
	for op, want := range map[string]float64{"put": sets + incrs, "get": gets, "delete": dels} {
		if got := m.value("oblivkv_store_operations_total", "op", op); got != want {
			t.Errorf("oblivkv_store_operations_total{op=%q} = %v, want %v", op, got, want)
		}
	}
	if got := m.value("oblivkv_store_keys"); got != sets-dels+1 {
		t.Errorf("oblivkv_store_keys = %v, want %d", got, sets-dels+1)
	}
	var observed uint64
	for cmd, want := range map[string]uint64{"set": sets, "get": gets, "del": dels, "incr": incrs} {
		h := m.metric("oblivkv_command_duration_seconds", "command", cmd).GetHistogram()
		if h.GetSampleCount() != want || h.GetSampleSum() <= 0 {
			t.Errorf("latency of %s: %d observations summing to %v s, want %d", cmd, h.GetSampleCount(), h.GetSampleSum(), want)
		}
		observed += h.GetSampleCount()
	}
	if observed != sets+gets+dels+incrs {
		t.Errorf("%d latency observations of SET, GET, DEL and INCR, want %d", observed, sets+gets+dels+incrs)
	}

	// The backend and journal counters are INFO's, at one quiet moment.
	for metric, field := range map[string]string{
		"oblivkv_backend_round_trips_total":     "backend_calls",
		"oblivkv_backend_errors_total":          "backend_errors",
		"oblivkv_journal_fsyncs_total":          "journal_fsyncs",
		"oblivkv_journal_records_total":         "journal_records",
		"oblivkv_journal_segments_reused_total": "journal_segments_reused", // 0 until a checkpoint drops a segment
	} {
		mayBeZero := field == "backend_errors" || field == "journal_segments_reused"
		if got, want := m.value(metric), info[field]; got != want || want <= 0 && !mayBeZero {
			t.Errorf("%s = %v, INFO %s = %v; want them equal and positive", metric, got, field, want)
		}
	}
	for metric, fields := range map[string]map[string]string{
		"oblivkv_backend_bytes_total":     {"read": "backend_bytes_read", "write": "backend_bytes_written"},
		"oblivkv_backend_addresses_total": {"read": "backend_addrs_read", "write": "backend_addrs_written"},
		"oblivkv_backend_calls_total":     {"read": "backend_reads", "write": "backend_writes"},
	} {
		for op, field := range fields {
			if got, want := m.value(metric, "op", op), info[field]; got != want || want <= 0 {
				t.Errorf("%s{op=%q} = %v, INFO %s = %v; want them equal and positive", metric, op, got, field, want)
			}
		}
	}
	for _, name := range []string{"stash_size", "trees", "path_reads"} {
		if got, want := m.value("oblivkv_protocol_stat", "name", name), info[name]; got != want {
			t.Errorf("oblivkv_protocol_stat{name=%q} = %v, INFO %v", name, got, want)
		}
	}
	// The disk backend's own figures (on the pebble engine): in INFO, and
	// as metrics of their own.
	if got, want := m.value("oblivkv_disk_wal_bytes_total"), info["disk_wal_bytes"]; got != want || want <= 0 {
		t.Errorf("oblivkv_disk_wal_bytes_total = %v, INFO disk_wal_bytes = %v; want them equal and positive", got, want)
	}
	for _, name := range []string{"oblivkv_disk_write_amplification", "oblivkv_disk_compactions_total", "oblivkv_disk_write_stalls_total", "oblivkv_disk_l0_files", "oblivkv_disk_bytes", "oblivkv_disk_cache_bytes"} {
		m.value(name)
	}
	if got := m.value("oblivkv_disk_cache_capacity"); got != 16<<20 || info["disk_cache_capacity"] != got {
		t.Errorf("with --disk-cache 16: oblivkv_disk_cache_capacity = %v, INFO disk_cache_capacity = %v; want 16 MiB", got, info["disk_cache_capacity"])
	}
	// No protocol stat is exported under its journal_ name twice.
	if m.has("oblivkv_protocol_stat", "name", "journal_fsyncs") {
		t.Error("journal_fsyncs is also a protocol_stat series")
	}
	if got := m.value("oblivkv_store_info", "protocol", "treebeard", "capacity", "1024",
		"value_size", "1024", "backend", "disk", "options", "Epoch=500µs"); got != 1 {
		t.Errorf("oblivkv_store_info = %v, want 1", got)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		m.value(name)
	}
	s.stop(t)
}

// TestServeMetricsSlots: on the disk backend's default engine, its
// figures are in INFO and are metrics of their own.
func TestServeMetricsSlots(t *testing.T) {
	maddr := freeAddr(t)
	s := startServe(t, t.TempDir(), "--capacity", "64", "--value-size", "64", "--metrics-addr", maddr)
	c := client(t, s.addr)
	for i := range 20 {
		if err := c.Set(context.Background(), fmt.Sprintf("k%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fams, info := quietScrape(t, c, maddr)
	m := metricsOf{t, fams}
	for metric, field := range map[string]string{
		"oblivkv_disk_syncs_total": "disk_syncs", "oblivkv_disk_slots_used": "disk_slots_used",
		"oblivkv_disk_slots_free": "disk_slots_free", "oblivkv_disk_bytes": "disk_bytes",
	} {
		if got, want := m.value(metric), info[field]; got != want || want <= 0 && field != "disk_slots_free" {
			t.Errorf("%s = %v, INFO %s = %v; want them equal and positive", metric, got, field, want)
		}
	}
	if m.has("oblivkv_disk_wal_bytes_total") {
		t.Error("a store on the slots engine exports pebble's figures")
	}
	s.stop(t)
}

// TestServeMetricsAddrChecked: a --metrics-addr in use is refused before
// a store is written, and without --metrics-addr nothing is served or
// logged about metrics.
func TestServeMetricsAddrChecked(t *testing.T) {
	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if out := serveFails(t, dir, "--metrics-addr", busy.Addr().String()); !strings.Contains(out, "metrics listen") ||
		!strings.Contains(out, "address already in use") {
		t.Errorf("metrics address in use: %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Fatalf("a refused start left a data dir: %v", err)
	}
	s := startServe(t, dir, smallStore...)
	if !waitServing(s) {
		t.Fatalf("serve did not start: %s", s.stderr)
	}
	s.stop(t)
	if strings.Contains(s.stderr.String(), "metrics") {
		t.Errorf("serve without --metrics-addr mentions metrics: %s", s.stderr)
	}
}

// waitServing waits up to 20 s for serve to log that it serves (it
// listens before it opens the store) and reports whether it did.
func waitServing(s *server) bool {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(s.stderr.String(), "oblivkv serving") {
			return true
		}
	}
	return false
}

// quietScrape scrapes /metrics between two INFOs that agree on the
// backend and journal counters, so that the scrape saw the same values
// (a store may touch its backend after it answered).
func quietScrape(t *testing.T, c *goredis.Client, maddr string) (map[string]*dto.MetricFamily, map[string]float64) {
	t.Helper()
	for range 100 {
		before := infoStats(t, c)
		fams := scrape(t, maddr)
		after := infoStats(t, c)
		quiet := true
		for k, v := range before {
			if strings.HasPrefix(k, "backend_") || strings.HasPrefix(k, "journal_") {
				quiet = quiet && after[k] == v
			}
		}
		if quiet {
			return fams, after
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the backend counters never stood still between two INFOs")
	return nil, nil
}

// infoStats returns INFO's Oblivkv section (the store's and the backend's
// counters, the protocol's stats) as numbers.
func infoStats(t *testing.T, c *goredis.Client) map[string]float64 {
	t.Helper()
	text, err := c.Info(context.Background(), "oblivkv").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]float64{}
	for line := range strings.SplitSeq(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				stats[k] = f
			}
		}
	}
	return stats
}

// scrape GETs /metrics and parses the text exposition format.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// metricsOf finds series in a scrape.
type metricsOf struct {
	t    *testing.T
	fams map[string]*dto.MetricFamily
}

// find returns the series of family name whose labels include the given
// name, value pairs, or nil.
func (m metricsOf) find(name string, labels ...string) *dto.Metric {
	for _, s := range m.fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if match {
			return s
		}
	}
	return nil
}

func (m metricsOf) has(name string, labels ...string) bool { return m.find(name, labels...) != nil }

// metric is find, failing the test when there is no such series.
func (m metricsOf) metric(name string, labels ...string) *dto.Metric {
	m.t.Helper()
	s := m.find(name, labels...)
	if s == nil {
		m.t.Fatalf("no series %s%v in the scrape", name, labels)
	}
	return s
}

// value is the value of a counter, gauge or untyped series.
func (m metricsOf) value(name string, labels ...string) float64 {
	m.t.Helper()
	s := m.metric(name, labels...)
	switch {
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	}
	return s.GetUntyped().GetValue()
}
