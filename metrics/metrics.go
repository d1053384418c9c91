// Package metrics exports a served store's counters to Prometheus: the
// commands and their latency (fed by the RESP server), and at every scrape
// a snapshot of the store's kv.Stats (operations, backend round trips,
// addresses and bytes, the protocol's own stats, the journal's counters and
// the store's parameters). It owns one prometheus.Registry, never the
// global default, with the Go runtime and process collectors beside its
// own, and the HTTP server of /metrics.
//
// It must never label a metric by a key, a value or anything derived from
// them (a length, a hash, a shard or tree of a key): whoever scrapes
// /metrics would learn the access pattern the protocols hide. Label values
// come only from fixed sets: command names from a list given at New,
// operation kinds, and the names of the protocol's stats. Even so, the
// metrics show the trusted side's view (how many reads and writes, how
// long each took), which an oblivious protocol hides from the storage
// operator: serve them only to the proxy's operators, never to the
// storage's.
//
// # Metrics
//
//	oblivkv_store_info{protocol,capacity,value_size,max_key_size,backend,options}  gauge, always 1
//	oblivkv_store_operations_total{op="get"|"put"|"delete"}                        counter
//	oblivkv_store_keys                                                             gauge
//	oblivkv_command_duration_seconds{command}                                      histogram
//	oblivkv_backend_round_trips_total                                              counter
//	oblivkv_backend_calls_total{op="read"|"write"|"delete"}                        counter
//	oblivkv_backend_addresses_total{op="read"|"write"|"delete"}                    counter
//	oblivkv_backend_bytes_total{op="read"|"write"}                                 counter
//	oblivkv_backend_errors_total                                                   counter
//	oblivkv_journal_<stat>_total (records, bytes, fsyncs, checkpoints, segments_reused) counter
//	oblivkv_batch_utilisation                                                      gauge
//	oblivkv_protocol_stat{name}                                                    gauge
//
// The store operations are those of kv.Store: a DEL command Gets each key
// before it Deletes it, so it counts a get and a delete per key. A
// command's duration runs from its parse to its reply being buffered, the
// store call included. Each protocol stat (kv.Stats.Extra) named journal_X
// becomes the counter oblivkv_journal_X_total, batch_utilisation the gauge
// oblivkv_batch_utilisation, and every other one a series of
// oblivkv_protocol_stat, labelled by its name: stash and cache sizes, the
// protocol's parameters, and its own counters, which only grow, so rate()
// applies to them. Journal metrics appear for journaled protocols only.
package metrics

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/oblivkv/oblivkv/kv"
)

// UnknownCommand labels the commands not named in Info.Commands.
const UnknownCommand = "unknown"

// DurationBuckets are the upper bounds of the command duration histogram,
// in seconds: 100 us doubling to 6.6 s, wide enough for a plain store on
// memory and for an ORAM behind a WAN.
var DurationBuckets = prometheus.ExponentialBuckets(100e-6, 2, 17)

// Info is what a served store's metrics say beside its Stats.
type Info struct {
	// Commands are the command names ObserveCommand labels by; any other
	// name is counted as UnknownCommand.
	Commands []string
	// Backend is the kind of backend (mem, disk, redis), without an
	// address.
	Backend string
	// Options are the protocol's options as the store records them
	// (options.Args, space-separated), e.g. "Epoch=2ms Trees=8";
	// empty for the defaults.
	Options string
}

// Metrics holds the registry of one served store.
type Metrics struct {
	reg      *prometheus.Registry
	commands map[string]prometheus.Observer // read-only after New
	srv      *http.Server
}

// New returns the metrics of store. The store is asked for its Stats at
// every scrape.
func New(store kv.Store, info Info) *Metrics {
	reg := prometheus.NewRegistry()
	durations := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "oblivkv_command_duration_seconds",
		Help:    "Time from a command's parse to its reply being buffered, by command.",
		Buckets: DurationBuckets,
	}, []string{"command"})
	reg.MustRegister(durations, &storeCollector{store: store, info: info},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{reg: reg, commands: map[string]prometheus.Observer{}}
	for _, name := range append(slices.Clone(info.Commands), UnknownCommand) {
		m.commands[name] = durations.WithLabelValues(name)
	}
	m.srv = &http.Server{Handler: m.mux(), ReadHeaderTimeout: 10 * time.Second}
	return m
}

// ObserveCommand records that a command ran for took. A name not among
// Info.Commands is recorded as UnknownCommand. It suits
// resp.Options.Observe.
func (m *Metrics) ObserveCommand(command string, took time.Duration) {
	o, ok := m.commands[command]
	if !ok {
		o = m.commands[UnknownCommand]
	}
	o.Observe(took.Seconds())
}

// mux serves the registry on /metrics in the Prometheus exposition formats.
func (m *Metrics) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	return mux
}

// Serve serves /metrics on ln until Shutdown, when it returns
// http.ErrServerClosed. It closes ln.
func (m *Metrics) Serve(ln net.Listener) error { return m.srv.Serve(ln) }

// Shutdown stops Serve, letting scrapes in progress finish until ctx ends.
func (m *Metrics) Shutdown(ctx context.Context) error { return m.srv.Shutdown(ctx) }

// storeCollector turns one kv.Stats snapshot per scrape into metrics.
type storeCollector struct {
	store kv.Store
	info  Info
}

// desc describes a metric of the collector.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descInfo = desc("oblivkv_store_info", "The store's protocol and parameters, as labels; always 1.",
		"protocol", "capacity", "value_size", "max_key_size", "backend", "options")
	descOps        = desc("oblivkv_store_operations_total", "Store operations served, by kind (a DEL command gets, then deletes, each key).", "op")
	descKeys       = desc("oblivkv_store_keys", "Keys stored, as the trusted side knows it.")
	descRoundTrips = desc("oblivkv_backend_round_trips_total", "Backend calls, each one round trip to storage.")
	descCalls      = desc("oblivkv_backend_calls_total", "Backend calls by kind.", "op")
	descAddrs      = desc("oblivkv_backend_addresses_total", "Storage addresses read, written or deleted.", "op")
	descBytes      = desc("oblivkv_backend_bytes_total", "Bytes read from and written to storage.", "op")
	descErrors     = desc("oblivkv_backend_errors_total", "Backend calls that failed.")
	descUtil       = desc("oblivkv_batch_utilisation", "Share of a batch's query slots taken by real requests, as the protocol reports it.")
	descStat       = desc("oblivkv_protocol_stat", "A protocol-specific stat (INFO's Oblivkv section), by name: sizes, parameters and counters.", "name")
)

// Describe sends no descriptions: the journal metrics depend on the
// protocol, so the collector is unchecked.
func (c *storeCollector) Describe(chan<- *prometheus.Desc) {}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descInfo, 1, st.Protocol, strconv.Itoa(st.Capacity), strconv.Itoa(st.ValueSize),
		strconv.Itoa(st.MaxKeySize), c.info.Backend, c.info.Options)
	counter(descOps, st.Gets, "get")
	counter(descOps, st.Puts, "put")
	counter(descOps, st.Deletes, "delete")
	gauge(descKeys, float64(st.Keys))
	b := st.Backend
	counter(descRoundTrips, b.Calls)
	counter(descCalls, b.Reads, "read")
	counter(descCalls, b.Writes, "write")
	counter(descCalls, b.Deletes, "delete")
	counter(descAddrs, b.AddrsRead, "read")
	counter(descAddrs, b.AddrsWritten, "write")
	counter(descAddrs, b.AddrsDeleted, "delete")
	counter(descBytes, b.BytesRead, "read")
	counter(descBytes, b.BytesWritten, "write")
	counter(descErrors, b.Errors)

	seen := make(map[string]bool, len(st.Extra))
	for _, e := range st.Extra {
		if seen[e.Name] { // a registry refuses a series twice
			continue
		}
		seen[e.Name] = true
		switch {
		case strings.HasPrefix(e.Name, "journal_"):
			name := "oblivkv_journal_" + sanitize(strings.TrimPrefix(e.Name, "journal_")) + "_total"
			d := desc(name, "The journal's "+e.Name+" stat.")
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, e.Value)
		case e.Name == "batch_utilisation":
			gauge(descUtil, e.Value)
		case strings.HasPrefix(e.Name, "disk_"):
			ch <- diskMetric(e)
		default:
			gauge(descStat, e.Value, e.Name)
		}
	}
}

// diskCounters are the disk backend's statistics that only grow; the
// others are gauges.
var diskCounters = map[string]bool{
	kv.StatDiskCompactions: true, kv.StatDiskFlushes: true, kv.StatDiskWriteStalls: true,
	kv.StatDiskWriteStallSeconds: true, kv.StatDiskWALBytes: true,
	kv.StatDiskSyncs: true,
}

// diskMetric exports one of the disk backend's statistics as
// oblivkv_NAME, a counter (NAME_total) or a gauge.
func diskMetric(e kv.Stat) prometheus.Metric {
	name, kind := "oblivkv_"+sanitize(e.Name), prometheus.GaugeValue
	if diskCounters[e.Name] {
		name, kind = name+"_total", prometheus.CounterValue
	}
	return prometheus.MustNewConstMetric(desc(name, "The disk backend's "+e.Name+" stat."), kind, e.Value)
}

// sanitize makes s part of a metric name: every character but ASCII
// letters, digits and '_' becomes '_'.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}
