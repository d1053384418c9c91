package auditrun

import (
	"fmt"
	"html/template"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/oblivkv/oblivkv/bench/plot"
)

// plotTitles describe the plots of every audit; a protocol titles its
// own (plotTitle).
var plotTitles = map[string][2]string{
	"access": {"Addresses by how many calls touched them", "addresses (bins 0, 1, 2-3, 4-7, ... calls)"},
}

// maxBars bounds the cells of one plot: wider histograms are folded into
// this many equal groups of neighbouring cells.
const maxBars = 24

// WriteReport writes dir/index.html and one SVG per plot (dir/NAME.svg),
// and returns the SVG files' names.
func (res *Result) WriteReport(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, name := range slices.Sorted(maps.Keys(res.Plots)) {
		f := name + ".svg"
		if err := writeSVG(filepath.Join(dir, f), res.chart(name)); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	out, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		return nil, err
	}
	err = reportPage.Execute(out, res.page(files))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return files, err
}

func writeSVG(path string, c plot.Chart) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = c.WriteSVG(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// chart draws plot name: one group per cell (folded to maxBars), one bar
// per workload.
func (res *Result) chart(name string) plot.Chart {
	t := res.plotTitle(name)
	c := plot.Chart{Title: t[0], YLabel: t[1], Scale: plot.Linear}
	hs := res.Plots[name]
	n := 0
	for _, h := range hs {
		n = max(n, len(h))
	}
	per := max((n+maxBars-1)/maxBars, 1)
	for n%per != 0 && per < n { // equal groups
		per++
	}
	for from := 0; from < n; from += per {
		g := plot.Group{Label: cellLabel(name, from, min(from+per, n)-1)}
		for _, w := range res.Config.Workloads {
			if h, ok := hs[w]; ok {
				g.Bars = append(g.Bars, plot.Bar{Series: w, Value: float64(sumRange(h, from, from+per))})
			}
		}
		c.Groups = append(c.Groups, g)
	}
	return c
}

func cellLabel(name string, from, to int) string {
	if name == "access" {
		lo, hi := 0, 0
		if from > 0 {
			lo = 1 << (from - 1)
		}
		if to > 0 {
			hi = 1<<to - 1
		}
		from, to = lo, hi
	}
	if from == to {
		return strconv.Itoa(from)
	}
	return fmt.Sprintf("%d-%d", from, to)
}

func sumRange(h []int, from, to int) int {
	n := 0
	for i := from; i < min(to, len(h)); i++ {
		n += h[i]
	}
	return n
}

type pageData struct {
	R      JSONResult
	Rows   []checkRow
	Failed int
	Plots  []string
	Attack string
}

// checkRow is one row of the report's table of checks, its figures
// written as a reader reads them.
type checkRow struct {
	Name, Stat, Critical, P, Detail string
	Pass                            bool
}

func checkRows(checks []JSONCheck) []checkRow {
	rows := make([]checkRow, len(checks))
	for i, c := range checks {
		critical := "n/a" // too few samples to test anything: a null in the JSON
		if c.Critical != nil {
			critical = fmt.Sprintf("%.4g", *c.Critical)
		}
		rows[i] = checkRow{Name: c.Name, Stat: fmt.Sprintf("%.4g", c.Stat), Critical: critical,
			P: fmt.Sprintf("%.3g", c.P), Detail: c.Detail, Pass: c.Pass}
	}
	return rows
}

func (res *Result) page(files []string) pageData {
	d := pageData{R: res.JSON(), Failed: len(res.Failed()), Plots: files}
	d.Rows = checkRows(d.R.Checks)
	if a := res.Attack; a != nil {
		d.Attack = fmt.Sprintf("%.1f%% of the top %d keys recovered (chance %.1f%%, bound %.1f%%)",
			100*a.Accuracy, len(a.Named), 100*a.Chance, 100*a.Bound)
	}
	return d
}

var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"/><title>oblivkv audit: {{.R.Protocol}}</title>
<style>
body{font-family:sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}
td.num{text-align:right;font-family:monospace}.pass{color:#2a7a2a}.fail{color:#b00020;font-weight:bold}
img{max-width:100%;border:1px solid #eee;margin:8px 0}
</style></head><body>
<h1>oblivkv audit: {{.R.Protocol}}</h1>
<p id="verdict" class="{{if .R.Pass}}pass{{else}}fail{{end}}">{{if .R.Pass}}PASS: every check passed{{else}}FAIL: {{.Failed}} of {{len .R.Checks}} checks failed{{end}}</p>
<p>Workloads {{range $i, $w := .R.Workloads}}{{if $i}}, {{end}}{{$w}}{{end}}: {{.R.Ops}} requests each over {{.R.Records}} keys from {{.R.Clients}} clients, seed {{.R.Seed}}.</p>
{{if .Attack}}<h2>Frequency attack</h2><p id="attack">{{.Attack}}</p>{{end}}
<h2>Checks</h2>
<table id="checks"><tr><th>check</th><th>verdict</th><th>statistic</th><th>critical</th><th>p</th><th>detail</th></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td class="{{if .Pass}}pass{{else}}fail{{end}}">{{if .Pass}}pass{{else}}FAIL{{end}}</td><td class="num">{{.Stat}}</td><td class="num">{{.Critical}}</td><td class="num">{{.P}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>
<h2>Plots</h2>
{{range .Plots}}<div><img src="{{.}}" alt="{{.}}"/></div>
{{end}}</body></html>
`))
