package auditrun

import (
	"bytes"
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
)

// TestReportShowsNumbers reads the report's table of checks as a person
// reads it: no formatting error (%!) anywhere on the page, and in each
// row the statistic, the critical value and p are numbers, the ones the
// JSON holds to the digits shown, or n/a for the critical value of a check
// too small to test anything.
func TestReportShowsNumbers(t *testing.T) {
	res := &Result{Config: Config{Protocol: "x", Workloads: []string{"uniform"}, Ops: 10, Records: 4}, Checks: []audit.Check{
		audit.Uniform("tested", []int{10, 10, 10}),
		audit.Uniform("skewed", []int{1, 40, 1000}),
		audit.Uniform("too few", []int{3}),
		audit.Exact("exact", []string{"one violation"}),
	}}
	page := writtenPage(t, res)
	for _, bad := range []string{"%!", "<nil>"} {
		if bytes.Contains(page, []byte(bad)) {
			t.Errorf("the report shows %q:\n%s", bad, page)
		}
	}
	header, rows := tableCells(t, page, "checks")
	checks := res.JSON().Checks
	if len(rows) != len(checks) {
		t.Fatalf("%d rows for %d checks:\n%s", len(rows), len(checks), page)
	}
	for i, c := range checks {
		cell := func(column string) string {
			for j, h := range header {
				if h == column && j < len(rows[i]) {
					return rows[i][j]
				}
			}
			t.Fatalf("no %q cell in row %v (header %v)", column, rows[i], header)
			return ""
		}
		if cell("check") != c.Name {
			t.Errorf("row %d is %q, want %q", i, cell("check"), c.Name)
		}
		shownAs(t, c.Name+" statistic", cell("statistic"), c.Stat, 4)
		shownAs(t, c.Name+" p", cell("p"), c.P, 3)
		if c.Critical == nil {
			if got := cell("critical"); got != "n/a" {
				t.Errorf("%s: critical %q, want n/a", c.Name, got)
			}
			continue
		}
		shownAs(t, c.Name+" critical", cell("critical"), *c.Critical, 4)
	}
}

// writtenPage writes res's report into a temporary directory and returns
// its index.html.
func writtenPage(t *testing.T, res *Result) []byte {
	t.Helper()
	dir := t.TempDir()
	if _, err := res.WriteReport(dir); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	return page
}

// shownAs fails t unless cell is a number that rounds want to digits
// significant digits.
func shownAs(t *testing.T, what, cell string, want float64, digits int) {
	t.Helper()
	got, err := strconv.ParseFloat(cell, 64)
	if err != nil {
		t.Errorf("%s: %q is not a number", what, cell)
		return
	}
	if tol := math.Abs(want) * math.Pow(10, 1-float64(digits)); math.Abs(got-want) > tol {
		t.Errorf("%s: shown %q, the JSON's %v", what, cell, want)
	}
}

// tableCells parses page as XML and returns the texts of the header
// cells and of each row's cells of the table with the given id.
func tableCells(t *testing.T, page []byte, id string) (header []string, rows [][]string) {
	t.Helper()
	var html struct {
		Tables []struct {
			ID   string `xml:"id,attr"`
			Rows []struct {
				Cells []struct {
					Text string `xml:",chardata"`
				} `xml:",any"`
			} `xml:"tr"`
		} `xml:"body>table"`
	}
	if err := xml.Unmarshal(page, &html); err != nil {
		t.Fatalf("the report is not well-formed XML: %v", err)
	}
	for _, table := range html.Tables {
		if table.ID != id {
			continue
		}
		for _, r := range table.Rows {
			var cells []string
			for _, c := range r.Cells {
				cells = append(cells, strings.TrimSpace(c.Text))
			}
			rows = append(rows, cells)
		}
		if len(rows) == 0 {
			t.Fatalf("table %s has no header", id)
		}
		return rows[0], rows[1:]
	}
	t.Fatalf("the report has no table %s", id)
	return nil, nil
}
