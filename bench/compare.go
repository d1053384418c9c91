package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/oblivkv/oblivkv/bench/plot"
	"github.com/oblivkv/oblivkv/kv"
)

// The files WriteReport writes into its directory.
const (
	ReportIndex      = "index.md"
	ReportMarkdown   = "results.md"
	ReportCSV        = "results.csv"
	ReportThroughput = "throughput.svg"
	ReportP99        = "p99_latency.svg"
	ReportBytes      = "bytes_per_op.svg"
	ReportHighWater  = "high_water.svg"
)

// highWaterStats are the protocol counters (kv.Stats.Extra) that measure
// how large the trusted state grew: high-water marks of stashes, caches
// and buffers, and, for a cache without one, its size at the end of the
// run. Counters that are sizes at the end of the run of something that
// also has a high-water mark (stash_size, eviction_cache, subtree_nodes)
// are left out, and so are end-of-run sizes that say nothing of a bound
// (oblivistore's storage_cache, cloak's pending_keys).
var highWaterStats = []struct{ name, meaning string }{
	{kv.StatStashMax, "stash high-water mark, blocks (pathoram, taostore; treebeard: its largest shard's)"},
	{kv.StatSubtreeMax, "subtree high-water mark, buckets (taostore)"},
	{kv.StatEvictionCacheMax, "eviction cache high-water mark, blocks (oblivistore)"},
	{kv.StatShufflingBufferMax, "shuffling buffer high-water mark, blocks (oblivistore)"},
	{kv.StatCacheSize, "records cached at the end of the run (waffle)"},
}

// highWater returns r's counters that are high-water marks or cache
// sizes of its trusted state (see highWaterStats), in that list's order;
// none for a protocol that reports none (the baselines).
func highWater(r Result) []kv.Stat {
	var out []kv.Stat
	for _, h := range highWaterStats {
		if v := extra(r, h.name); v != nil {
			out = append(out, kv.Stat{Name: h.name, Value: *v})
		}
	}
	return out
}

// ReportInfo describes a run for the report's pages.
type ReportInfo struct {
	Command string // the command line that made the results
	Run     string // the run's settings: Describe's line
	Machine string // OS, CPUs, Go version, date
}

// WriteReport writes a comparison of the results into dir (created if
// needed): the table as Markdown (ReportMarkdown) and CSV (ReportCSV,
// WriteCSV's columns), bar charts of throughput, p99 latency, backend
// bytes per operation and trusted-state high-water marks as SVG, and
// ReportIndex linking them.
func WriteReport(dir string, info ReportInfo, results []Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, f func(io.Writer) error) error {
		file, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		return errors.Join(f(file), file.Close())
	}
	errs := []error{
		write(ReportMarkdown, func(w io.Writer) error { return writeMarkdown(w, info, results) }),
		write(ReportCSV, func(w io.Writer) error { return WriteCSV(w, results) }),
		write(ReportIndex, func(w io.Writer) error { return writeIndex(w, info) }),
	}
	for name, c := range charts(results) {
		errs = append(errs, write(name, c.WriteSVG))
	}
	return errors.Join(errs...)
}

// writeMarkdown writes the run's description and WriteTable's table in
// Markdown, with a column of each protocol's high-water marks.
func writeMarkdown(w io.Writer, info ReportInfo, results []Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Results\n\n%s\n\n", info.Run)
	header, rows := tableRows(results)
	if header != nil {
		markdownRow(&b, append(header, "high-water marks"))
		// The protocol and high-water columns left-aligned, the figures right.
		sep := []string{"---"}
		for range header[1:] {
			sep = append(sep, "---:")
		}
		markdownRow(&b, append(sep, "---"))
		for i, cells := range rows {
			markdownRow(&b, append(cells, highWaterCell(results[i])))
		}
	}
	b.WriteString("\nColumns: docs/benchmarks.md, \"The figures\". High-water marks: ")
	for i, h := range highWaterStats {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "`%s` %s", h.name, h.meaning)
	}
	b.WriteString("; `-`: the protocol reports none.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func markdownRow(b *strings.Builder, cells []string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
	}
	b.WriteString("\n")
}

func highWaterCell(r Result) string {
	var parts []string
	for _, s := range highWater(r) {
		parts = append(parts, s.Name+" "+strconv.FormatFloat(s.Value, 'f', -1, 64))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func writeIndex(w io.Writer, info ReportInfo) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Protocol comparison\n\n%s\n\n- Command: `%s`\n- Machine: %s\n\n", info.Run, info.Command, info.Machine)
	b.WriteString("Compare the ratios within this run, not absolute figures across runs:\n" +
		"docs/benchmarks.md, \"Comparing every protocol\", says how the run is made\n" +
		"and what each figure means.\n\n")
	fmt.Fprintf(&b, "- [Results table](%s) (Markdown), also as [CSV](%s) with every figure\n", ReportMarkdown, ReportCSV)
	plots := []struct{ title, file, unit string }{
		{"Throughput", ReportThroughput, "ops/s"},
		{"p99 latency", ReportP99, "ms"},
		{"Backend bytes per operation", ReportBytes, "log scale"},
		{"Trusted-state high-water marks", ReportHighWater, "stashes, caches and buffers; log scale"},
	}
	for _, p := range plots {
		fmt.Fprintf(&b, "- [%s](%s), %s\n", p.title, p.file, p.unit)
	}
	b.WriteString("\n")
	for _, p := range plots {
		fmt.Fprintf(&b, "![%s](%s)\n", p.title, p.file)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// charts builds the report's bar charts, by file name.
func charts(results []Result) map[string]plot.Chart {
	one := func(title, unit string, scale plot.Scale, value func(Result) *float64, text func(float64) string) plot.Chart {
		c := plot.Chart{Title: title, YLabel: unit, Scale: scale}
		for _, r := range results {
			g := plot.Group{Label: r.Protocol, Absent: "not reported"}
			if v := value(r); v != nil {
				g.Bars = []plot.Bar{{Value: *v, Text: text(*v)}}
			}
			c.Groups = append(c.Groups, g)
		}
		return c
	}
	hw := plot.Chart{Title: "Trusted-state high-water marks", YLabel: "blocks, buckets or records",
		Scale: plot.Log, SeriesNotes: map[string]string{}}
	for _, h := range highWaterStats {
		hw.SeriesNotes[h.name] = h.meaning
	}
	for _, r := range results {
		g := plot.Group{Label: r.Protocol, Absent: "none reported"}
		for _, s := range highWater(r) {
			g.Bars = append(g.Bars, plot.Bar{Series: s.Name, Value: s.Value, Text: strconv.FormatFloat(s.Value, 'f', -1, 64)})
		}
		hw.Groups = append(hw.Groups, g)
	}
	return map[string]plot.Chart{
		ReportThroughput: one("Throughput", "operations per second", plot.Auto,
			func(r Result) *float64 { return &r.OpsPerSec }, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		ReportP99: one("p99 latency", "p99 latency, ms", plot.Auto,
			func(r Result) *float64 { return &r.P99MS }, latency),
		ReportBytes: one("Backend bytes per operation", "bytes per operation", plot.Log,
			func(r Result) *float64 { return r.BytesPerOp }, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		ReportHighWater: hw,
	}
}
