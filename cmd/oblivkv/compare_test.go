package main

import (
	"encoding/csv"
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/bench"
	"github.com/oblivkv/oblivkv/kv"
)

// svgChart is what TestBenchCompare reads back from a plot: the SVG
// root's rects and texts (the plot package draws every one at top level).
type svgChart struct {
	Rects []struct {
		Class  string `xml:"class,attr"`
		Group  string `xml:"data-group,attr"`
		Series string `xml:"data-series,attr"`
	} `xml:"rect"`
	Texts []struct {
		Class string `xml:"class,attr"`
		Group string `xml:"data-group,attr"`
		Text  string `xml:",chardata"`
	} `xml:"text"`
}

// TestBenchCompare runs --compare at a tiny scale and checks its files:
// the CSV has a row per protocol, the Markdown table shows the CSV's
// figures, and every plot parses and has one bar per protocol (or, for
// the high-water marks, the protocol's counters or an absent note) under
// its label.
func TestBenchCompare(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	protocols := []string{"plain", "pathoram", "waffle"}
	if _, err := runBenchCmd(t, "--compare", "--out", dir, "--protocols", strings.Join(protocols, ","),
		"--records", "256", "--ops", "200", "--concurrency", "8", "--value-size", "64"); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	rows, err := csv.NewReader(strings.NewReader(read(bench.ReportCSV))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+len(protocols) {
		t.Fatalf("CSV has %d rows, want a header and %d", len(rows), len(protocols))
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range []string{"protocol", "ops_per_sec", "p50_ms", "p95_ms", "p99_ms", "max_ms",
		"backend_round_trips_per_op", "backend_bytes_per_op", "amplification", "errors", "extra"} {
		if _, ok := col[name]; !ok {
			t.Errorf("CSV lacks column %q: %v", name, rows[0])
		}
	}
	csvNum := func(row []string, name string) float64 {
		v, err := strconv.ParseFloat(row[col[name]], 64)
		if err != nil {
			t.Fatalf("CSV %s of %s: %v", name, row[0], err)
		}
		return v
	}
	for i, p := range protocols {
		if rows[1+i][col["protocol"]] != p {
			t.Errorf("CSV row %d is %q, want %q", i+1, rows[1+i][col["protocol"]], p)
		}
	}

	// The Markdown table: one row per protocol, figures rounded from the CSV's.
	var header []string
	var table [][]string
	for line := range strings.SplitSeq(read(bench.ReportMarkdown), "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		switch {
		case header == nil:
			header = cells
		case !strings.HasPrefix(cells[0], "---"):
			table = append(table, cells)
		}
	}
	if len(table) != len(protocols) {
		t.Fatalf("Markdown table has %d rows, want %d:\n%s", len(table), len(protocols), read(bench.ReportMarkdown))
	}
	// Each column's CSV field, and how far the rounded cell may be from it.
	columns := map[string]struct {
		field string
		tol   func(float64) float64
	}{
		"ops/s": {"ops_per_sec", fixed(0)}, "p50 ms": {"p50_ms", significant3}, "p95 ms": {"p95_ms", significant3},
		"p99 ms": {"p99_ms", significant3}, "max ms": {"max_ms", significant3},
		"rt/op": {"backend_round_trips_per_op", fixed(2)}, "bytes/op": {"backend_bytes_per_op", fixed(0)},
		"ampl": {"amplification", fixed(2)}, "errors": {"errors", fixed(0)},
	}
	for i, cells := range table {
		row := rows[1+i]
		if cells[0] != row[col["protocol"]] {
			t.Errorf("Markdown row %d is %q, CSV's %q", i, cells[0], row[col["protocol"]])
		}
		for j, name := range header {
			c, ok := columns[name]
			if !ok {
				continue
			}
			got, err := strconv.ParseFloat(cells[j], 64)
			want := csvNum(row, c.field)
			if err != nil || math.Abs(got-want) > c.tol(want) {
				t.Errorf("%s %s: Markdown %q, CSV %v", cells[0], name, cells[j], want)
			}
		}
		vs := csvNum(row, "ops_per_sec") / csvNum(rows[1], "ops_per_sec")
		if got, err := strconv.ParseFloat(strings.TrimSuffix(cells[2], "x"), 64); err != nil || math.Abs(got-vs) > 0.005+1e-9 {
			t.Errorf("%s %s: %q, CSV ratio %v", cells[0], header[2], cells[2], vs)
		}
		highWater := cells[len(cells)-1]
		for part := range strings.SplitSeq(row[col["extra"]], ";") {
			name, value, _ := strings.Cut(part, "=")
			if (name == "stash_max" || name == "cache_size") && !strings.Contains(highWater, name+" "+value) {
				t.Errorf("%s: high-water marks %q lack %s=%s", cells[0], highWater, name, value)
			}
		}
	}
	if header[2] != "vs plain" || table[0][len(header)-1] != "-" {
		t.Errorf("header %v, plain's high-water marks %q", header, table[0][len(header)-1])
	}

	// The plots, each linked from the index.
	index := read(bench.ReportIndex)
	for _, name := range []string{bench.ReportMarkdown, bench.ReportCSV} {
		if !strings.Contains(index, "("+name+")") {
			t.Errorf("index.md does not link %s:\n%s", name, index)
		}
	}
	highWater := map[string][]string{"plain": nil, "pathoram": {"stash_max"}, "waffle": {"cache_size"}}
	for _, name := range []string{bench.ReportThroughput, bench.ReportP99, bench.ReportBytes, bench.ReportHighWater} {
		if !strings.Contains(index, "("+name+")") {
			t.Errorf("index.md does not link %s", name)
		}
		var c svgChart
		if err := xml.Unmarshal([]byte(read(name)), &c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		bars := map[string][]string{}
		for _, r := range c.Rects {
			if r.Class == "bar" {
				bars[r.Group] = append(bars[r.Group], r.Series)
			}
		}
		var labels []string
		absent := map[string]bool{}
		for _, tx := range c.Texts {
			switch tx.Class {
			case "label":
				labels = append(labels, tx.Text)
			case "absent":
				absent[tx.Group] = true
			}
		}
		if !slices.Equal(labels, protocols) {
			t.Errorf("%s: labels %v, want %v", name, labels, protocols)
		}
		for _, p := range protocols {
			want := []string{""}
			if name == bench.ReportHighWater {
				want = highWater[p]
			}
			if !slices.Equal(bars[p], want) || absent[p] != (want == nil) {
				t.Errorf("%s: %s has bars %q (absent %v), want %q", name, p, bars[p], absent[p], want)
			}
		}
	}
}

func fixed(decimals int) func(float64) float64 {
	return func(float64) float64 { return 0.5*math.Pow(10, -float64(decimals)) + 1e-9 }
}

// significant3 is the rounding of a latency cell: three significant
// digits, at most six decimals.
func significant3(v float64) float64 {
	if v == 0 {
		return 0
	}
	decimals := min(max(2-int(math.Floor(math.Log10(v))), 0), 6)
	return fixed(decimals)(v)
}

func TestBenchCompareProtocols(t *testing.T) {
	if got := compareOrder([]string{"cloak", "encrypted", "oblivistore", "plain"}); !slices.Equal(got,
		[]string{"plain", "encrypted", "cloak", "oblivistore"}) {
		t.Errorf("compareOrder: %v", got)
	}
	cmd := newBenchCmd()
	if err := cmd.ParseFlags([]string{"--compare", "--out", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	var f benchFlags
	f.compare, f.out, f.protocols = true, "x", "plain,encrypted"
	got, err := f.protocolList(cmd)
	if want := compareOrder(kv.Protocols()); err != nil || !slices.Equal(got, want) || want[0] != "plain" {
		t.Errorf("--compare runs %v (%v), want %v", got, err, want)
	}
	for _, args := range [][]string{
		{"--compare"},
		{"--compare", "--out", t.TempDir(), "--addr", "127.0.0.1:1"},
	} {
		if _, err := runBenchCmd(t, append(args, "--records", "10", "--ops", "10")...); err == nil {
			t.Errorf("bench %v accepted", args)
		}
	}
}
