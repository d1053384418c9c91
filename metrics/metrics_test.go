package metrics

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
)

// statsStore is a kv.Store whose Stats are given; its other methods are
// not called.
type statsStore struct {
	kv.Store
	stats kv.Stats
}

func (s statsStore) Stats() kv.Stats { return s.stats }

var stats = kv.Stats{
	Protocol: "cloak", Gets: 5, Puts: 7, Deletes: 2, Keys: 4,
	Capacity: 1024, ValueSize: 64, MaxKeySize: 256,
	Backend: observe.Counters{Calls: 11, Reads: 6, Writes: 4, Deletes: 1,
		AddrsRead: 60, AddrsWritten: 40, AddrsDeleted: 3, BytesRead: 6000, BytesWritten: 4000, Errors: 1},
	Extra: []kv.Stat{
		{Name: "stash_size", Value: 3},
		{Name: "batch_utilisation", Value: 0.25},
		{Name: "zipf_s", Value: 1.5},
		{Name: "stash_size", Value: 99}, // a duplicate is dropped
		{Name: "journal_fsyncs", Value: 9},
		{Name: "journal_check-points", Value: 2},
	},
}

// TestCollect: each field of kv.Stats becomes the metric the package doc
// names, with its value; journal_* stats are counters of their own,
// batch_utilisation a gauge, every other protocol stat a series of
// oblivkv_protocol_stat, and a repeated stat name is reported once.
func TestCollect(t *testing.T) {
	m := New(statsStore{stats: stats}, Info{Backend: "mem", Options: "delta=5ms"})
	want := `
# HELP oblivkv_store_info The store's protocol and parameters, as labels; always 1.
# TYPE oblivkv_store_info gauge
oblivkv_store_info{backend="mem",capacity="1024",max_key_size="256",options="delta=5ms",protocol="cloak",value_size="64"} 1
# HELP oblivkv_store_operations_total Store operations served, by kind (a DEL command gets, then deletes, each key).
# TYPE oblivkv_store_operations_total counter
oblivkv_store_operations_total{op="delete"} 2
oblivkv_store_operations_total{op="get"} 5
oblivkv_store_operations_total{op="put"} 7
# HELP oblivkv_store_keys Keys stored, as the trusted side knows it.
# TYPE oblivkv_store_keys gauge
oblivkv_store_keys 4
# HELP oblivkv_backend_round_trips_total Backend calls, each one round trip to storage.
# TYPE oblivkv_backend_round_trips_total counter
oblivkv_backend_round_trips_total 11
# HELP oblivkv_backend_calls_total Backend calls by kind.
# TYPE oblivkv_backend_calls_total counter
oblivkv_backend_calls_total{op="delete"} 1
oblivkv_backend_calls_total{op="read"} 6
oblivkv_backend_calls_total{op="write"} 4
# HELP oblivkv_backend_addresses_total Storage addresses read, written or deleted.
# TYPE oblivkv_backend_addresses_total counter
oblivkv_backend_addresses_total{op="delete"} 3
oblivkv_backend_addresses_total{op="read"} 60
oblivkv_backend_addresses_total{op="write"} 40
# HELP oblivkv_backend_bytes_total Bytes read from and written to storage.
# TYPE oblivkv_backend_bytes_total counter
oblivkv_backend_bytes_total{op="read"} 6000
oblivkv_backend_bytes_total{op="write"} 4000
# HELP oblivkv_backend_errors_total Backend calls that failed.
# TYPE oblivkv_backend_errors_total counter
oblivkv_backend_errors_total 1
# HELP oblivkv_batch_utilisation Share of a batch's query slots taken by real requests, as the protocol reports it.
# TYPE oblivkv_batch_utilisation gauge
oblivkv_batch_utilisation 0.25
# HELP oblivkv_protocol_stat A protocol-specific stat (INFO's Oblivkv section), by name: sizes, parameters and counters.
# TYPE oblivkv_protocol_stat gauge
oblivkv_protocol_stat{name="stash_size"} 3
oblivkv_protocol_stat{name="zipf_s"} 1.5
# HELP oblivkv_journal_fsyncs_total The journal's journal_fsyncs stat.
# TYPE oblivkv_journal_fsyncs_total counter
oblivkv_journal_fsyncs_total 9
# HELP oblivkv_journal_check_points_total The journal's journal_check-points stat.
# TYPE oblivkv_journal_check_points_total counter
oblivkv_journal_check_points_total 2
`
	names := []string{"oblivkv_store_info", "oblivkv_store_operations_total", "oblivkv_store_keys",
		"oblivkv_backend_round_trips_total", "oblivkv_backend_calls_total", "oblivkv_backend_addresses_total",
		"oblivkv_backend_bytes_total", "oblivkv_backend_errors_total", "oblivkv_batch_utilisation",
		"oblivkv_protocol_stat", "oblivkv_journal_fsyncs_total", "oblivkv_journal_check_points_total"}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(m.reg, "go_goroutines", "process_start_time_seconds"); err != nil || n != 2 {
		t.Fatalf("Go and process collectors: %d series, %v; want 2", n, err)
	}
}

// TestObserveCommand: durations land in the histogram of their command;
// a name not given at New, which could be anything a client sent, is
// counted as UnknownCommand, never as a label of its own.
func TestObserveCommand(t *testing.T) {
	m := New(statsStore{stats: stats}, Info{Commands: []string{"get", "set"}})
	m.ObserveCommand("get", 150*time.Microsecond)
	m.ObserveCommand("get", 3*time.Millisecond)
	m.ObserveCommand("set", time.Second)
	m.ObserveCommand("patient:17", time.Millisecond)
	type hist struct {
		count uint64
		sum   float64
		le200 uint64 // observations of at most 200 us
	}
	got := map[string]hist{}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "oblivkv_command_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			h := s.GetHistogram()
			var le200 uint64
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == 200e-6 {
					le200 = b.GetCumulativeCount()
				}
			}
			got[s.GetLabel()[0].GetValue()] = hist{h.GetSampleCount(), h.GetSampleSum(), le200}
		}
	}
	want := map[string]hist{"get": {2, 0.00315, 1}, "set": {1, 1, 0}, UnknownCommand: {1, 0.001, 0}}
	if len(got) != len(want) {
		t.Fatalf("histograms %v, want %v", got, want)
	}
	for name, w := range want {
		if g := got[name]; g.count != w.count || g.le200 != w.le200 || math.Abs(g.sum-w.sum) > 1e-9 {
			t.Errorf("command %q: %+v, want %+v", name, g, w)
		}
	}
}

// TestServe: /metrics is served over HTTP in the text format until
// Shutdown; other paths are not found.
func TestServe(t *testing.T) {
	m := New(statsStore{stats: stats}, Info{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- m.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK ||
		!strings.Contains(string(body), "\noblivkv_backend_round_trips_total 11\n") {
		t.Fatalf("GET /metrics: %s, %v:\n%s", res.Status, err, body)
	}
	if res, err := http.Get(url + "/"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /: %v, %v; want 404", res.Status, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

// TestDashboard: docs/grafana/oblivkv.json is JSON, every panel and query
// takes its data source from the ${DS_PROMETHEUS} variable it declares,
// panel ids are unique, and every oblivkv_ metric its queries name is one
// this package exports (stats holds each kind of protocol stat).
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana/oblivkv.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	}
	type panel struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []target `json:"targets"`
	}
	var dash struct {
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	declared := false
	for _, v := range dash.Templating.List {
		declared = declared || v.Name == "DS_PROMETHEUS" && v.Type == "datasource"
	}
	if !declared || dash.UID == "" {
		t.Fatalf("no uid, or no DS_PROMETHEUS datasource variable: %+v", dash.Templating)
	}

	journaled := stats
	journaled.Extra = append(slices.Clone(stats.Extra), kv.Stat{Name: "journal_records"},
		kv.Stat{Name: "journal_bytes"}, kv.Stat{Name: "journal_checkpoints"})
	m := New(statsStore{stats: journaled}, Info{Commands: []string{"get"}})
	m.ObserveCommand("get", time.Millisecond)
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range fams {
		exported[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[f.GetName()+s] = true
			}
		}
	}
	ids, queries := map[int]bool{}, 0
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d queries", p.Title, p.Datasource, len(p.Targets))
		}
		for _, q := range p.Targets {
			queries++
			if q.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("panel %q: a query's datasource is %q", p.Title, q.Datasource.UID)
			}
			names := metricName.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no oblivkv metric", p.Title, q.Expr)
			}
			for _, name := range names {
				if !exported[name] {
					t.Errorf("panel %q: %s is not exported", p.Title, name)
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("%d queries", queries)
	}
}

var metricName = regexp.MustCompile(`oblivkv_[a-z_]+`)
