package bench

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReportShowsNumbers reads WriteReport's files as a person reads
// them: no formatting error (%!) in any; in the Markdown table every
// figure a number (the ratio with its x), or - exactly where the result
// lacks the figure, and the high-water marks as counters and numbers; in
// every plot, each value written above a bar a number.
func TestReportShowsNumbers(t *testing.T) {
	res := sampleResults(t)
	dir := t.TempDir()
	if err := WriteReport(dir, ReportInfo{Command: "oblivkv bench --compare", Run: "a run", Machine: "a machine"}, res); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, name := range []string{ReportIndex, ReportMarkdown, ReportCSV, ReportThroughput, ReportP99, ReportBytes, ReportHighWater} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, []byte("%!")); i >= 0 {
			t.Errorf("%s shows a formatting error: %q", name, b[i:min(i+40, len(b))])
		}
		files[name] = b
	}
	header, rows := markdownTable(string(files[ReportMarkdown]))
	if len(rows) != len(res) {
		t.Fatalf("%d rows for %d results:\n%s", len(rows), len(res), files[ReportMarkdown])
	}
	for i, r := range res {
		for j, column := range header {
			checkMarkdownCell(t, r, column, rows[i][j])
		}
	}
	for _, name := range []string{ReportThroughput, ReportP99, ReportBytes, ReportHighWater} {
		for _, v := range svgValues(t, files[name]) {
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				t.Errorf("%s: a bar's value %q is not a number", name, v)
			}
		}
	}
}

// optionalColumns are the table's columns a result may lack, shown as -.
var optionalColumns = map[string]func(Result) *float64{
	"rt/op":    func(r Result) *float64 { return r.RoundTripsPerOp },
	"bytes/op": func(r Result) *float64 { return r.BytesPerOp },
	"ampl":     func(r Result) *float64 { return r.Amplification },
}

// checkMarkdownCell fails t unless cell, in column of r's row, reads as
// a number, or as what the column shows in its place.
func checkMarkdownCell(t *testing.T, r Result, column, cell string) {
	t.Helper()
	switch {
	case column == "protocol":
		return
	case column == "high-water marks":
		checkHighWaterCell(t, r, cell)
		return
	case strings.HasPrefix(column, "vs "):
		cell = strings.TrimSuffix(cell, "x")
	}
	if figure, ok := optionalColumns[column]; ok && figure(r) == nil {
		if cell != "-" {
			t.Errorf("%s %s: %q for a figure not measured, want -", r.Protocol, column, cell)
		}
		return
	}
	if _, err := strconv.ParseFloat(cell, 64); err != nil {
		t.Errorf("%s %s: %q is not a number", r.Protocol, column, cell)
	}
}

// checkHighWaterCell fails t unless cell lists r's high-water marks as
// "name value" pairs, or is - when r has none.
func checkHighWaterCell(t *testing.T, r Result, cell string) {
	t.Helper()
	marks := highWater(r)
	if len(marks) == 0 {
		if cell != "-" {
			t.Errorf("%s: high-water marks %q, want -", r.Protocol, cell)
		}
		return
	}
	pairs := strings.Split(cell, ", ")
	if len(pairs) != len(marks) {
		t.Fatalf("%s: high-water marks %q, want %d", r.Protocol, cell, len(marks))
	}
	for i, pair := range pairs {
		name, value, _ := strings.Cut(pair, " ")
		v, err := strconv.ParseFloat(value, 64)
		if name != marks[i].Name || err != nil || v != marks[i].Value {
			t.Errorf("%s: high-water mark %q, want %s %v", r.Protocol, pair, marks[i].Name, marks[i].Value)
		}
	}
}

// markdownTable returns the header cells and the rows' cells of the table
// in md, its only lines that begin with "| " (the second, the alignment
// row, left out).
func markdownTable(md string) (header []string, rows [][]string) {
	var lines []string
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(line, "| ") {
			lines = append(lines, strings.Trim(line, "| "))
		}
	}
	if len(lines) < 2 {
		return nil, nil
	}
	for _, line := range append(lines[:1:1], lines[2:]...) {
		rows = append(rows, strings.Split(line, " | "))
	}
	return rows[0], rows[1:]
}

// svgValues returns the texts written above an SVG chart's bars.
func svgValues(t *testing.T, svg []byte) []string {
	t.Helper()
	var chart struct {
		Texts []struct {
			Class string `xml:"class,attr"`
			Text  string `xml:",chardata"`
		} `xml:"text"`
	}
	if err := xml.Unmarshal(svg, &chart); err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, tx := range chart.Texts {
		if tx.Class == "value" {
			values = append(values, tx.Text)
		}
	}
	if len(values) == 0 {
		t.Error("a chart with no values")
	}
	return values
}
