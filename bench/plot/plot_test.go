package plot

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// parsed is what a test reads back from an SVG: the bars' groups and
// series, the texts by class, and the texts of absent groups by group.
type parsed struct {
	bars   [][2]string // data-group, data-series
	texts  map[string][]string
	absent map[string]string
}

func parse(t *testing.T, svg []byte) parsed {
	t.Helper()
	p := parsed{texts: map[string][]string{}, absent: map[string]string{}}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var class, group string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return p
		}
		if err != nil {
			t.Fatalf("not XML: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range tok.Attr {
				attr[a.Name.Local] = a.Value
			}
			class, group = attr["class"], attr["data-group"]
			if tok.Name.Local == "rect" && class == "bar" {
				p.bars = append(p.bars, [2]string{group, attr["data-series"]})
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" && class != "" {
				p.texts[class] = append(p.texts[class], s)
				if class == "absent" {
					p.absent[group] = s
				}
			}
		case xml.EndElement:
			class = ""
		}
	}
}

func render(t *testing.T, c Chart) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestOneBarPerGroup(t *testing.T) {
	c := Chart{Title: "Throughput <ops>", YLabel: "ops/s", Groups: []Group{
		{Label: "plain", Bars: []Bar{{Value: 500000}}},
		{Label: "a&b", Bars: []Bar{{Value: 12000, Text: "12,000"}}},
		{Label: "remote", Absent: "not reported"},
	}}
	svg := render(t, c)
	p := parse(t, svg)
	if want := [][2]string{{"plain", ""}, {"a&b", ""}}; len(p.bars) != 2 || p.bars[0] != want[0] || p.bars[1] != want[1] {
		t.Errorf("bars %v", p.bars)
	}
	if got := strings.Join(p.texts["label"], ","); got != "plain,a&b,remote" {
		t.Errorf("labels %q", got)
	}
	if got := strings.Join(p.texts["value"], ","); got != "500k,12,000" {
		t.Errorf("values %q", got)
	}
	if p.absent["remote"] != "not reported" {
		t.Errorf("absent %v", p.absent)
	}
	// 500000 / 12000 spans less than two decades: linear, said nowhere.
	if got := p.texts["axis-label"]; len(got) != 1 || got[0] != "ops/s" {
		t.Errorf("axis label %q", got)
	}
}

func TestLogScaleSaidOnTheAxis(t *testing.T) {
	for _, c := range []Chart{
		{YLabel: "bytes", Scale: Log, Groups: []Group{{Label: "x", Bars: []Bar{{Value: 50}}}}},
		{YLabel: "bytes", Groups: []Group{{Label: "x", Bars: []Bar{{Value: 1024}}}, {Label: "y", Bars: []Bar{{Value: 150000}}}}},
	} {
		p := parse(t, render(t, c))
		if got := p.texts["axis-label"]; len(got) != 1 || got[0] != "bytes, log scale" {
			t.Errorf("axis label %q", got)
		}
	}
	a := Chart{Scale: Log, Groups: []Group{{Bars: []Bar{{Value: 1}}, Label: "x"}, {Bars: []Bar{{Value: 0}}, Label: "y"}}}.axis()
	if a.height(1) <= 0 || a.height(0) != 0 {
		t.Errorf("log axis %+v: height(1) %v, height(0) %v", a, a.height(1), a.height(0))
	}
}

func TestSeriesAndLegend(t *testing.T) {
	c := Chart{YLabel: "blocks", SeriesNotes: map[string]string{"stash_max": "stash high-water mark"}, Groups: []Group{
		{Label: "plain", Absent: "none reported"},
		{Label: "taostore", Bars: []Bar{{Series: "stash_max", Value: 5}, {Series: "subtree_max", Value: 1233}}},
		{Label: "pathoram", Bars: []Bar{{Series: "stash_max", Value: 3}}},
	}}
	p := parse(t, render(t, c))
	want := [][2]string{{"taostore", "stash_max"}, {"taostore", "subtree_max"}, {"pathoram", "stash_max"}}
	if len(p.bars) != len(want) {
		t.Fatalf("bars %v", p.bars)
	}
	for i := range want {
		if p.bars[i] != want[i] {
			t.Errorf("bar %d: %v, want %v", i, p.bars[i], want[i])
		}
	}
	if got := strings.Join(p.texts["legend"], ","); got != "stash_max: stash high-water mark,subtree_max" {
		t.Errorf("legend %q", got)
	}
	if p.absent["plain"] != "none reported" {
		t.Errorf("absent %v", p.absent)
	}
}

func TestFormat(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.00123: "0.00123", 1.5: "1.5", 12.34: "12.3", 999: "999",
		1024: "1.02k", 12345: "12.3k", 1.05e6: "1.05M", 2e9: "2G", 100: "100", 10: "10"} {
		if got := format(v); got != want {
			t.Errorf("format(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestLabelsAreNumbers reads a chart's figures as a person reads them:
// every tick of the value axis and every value written above a bar is a
// number (with a k, M or G suffix), the bar's value to three significant
// digits, on linear and log scales, and nothing shows a formatting error
// (%!).
func TestLabelsAreNumbers(t *testing.T) {
	values := []float64{0, 0.000421, 0.5, 7, 12.34, 999, 1024, 56789, 1.05e6, 3.2e9}
	for _, scale := range []Scale{Auto, Linear, Log} {
		c := Chart{Title: "figures", YLabel: "units", Scale: scale}
		for i, v := range values {
			c.Groups = append(c.Groups, Group{Label: strconv.Itoa(i), Bars: []Bar{{Value: v}}})
		}
		svg := render(t, c)
		if bytes.Contains(svg, []byte("%!")) {
			t.Fatalf("scale %d: a formatting error:\n%s", scale, svg)
		}
		p := parse(t, svg)
		if len(p.texts["tick"]) < 2 {
			t.Errorf("scale %d: ticks %q", scale, p.texts["tick"])
		}
		for _, tick := range p.texts["tick"] {
			if _, err := parseFormatted(tick); err != nil {
				t.Errorf("scale %d: tick %q: %v", scale, tick, err)
			}
		}
		if len(p.texts["value"]) != len(values) {
			t.Fatalf("scale %d: values %q", scale, p.texts["value"])
		}
		for i, s := range p.texts["value"] {
			got, err := parseFormatted(s)
			if want := values[i]; err != nil || math.Abs(got-want) > 0.005*want {
				t.Errorf("scale %d: bar %v written %q (%v)", scale, want, s, err)
			}
		}
	}
}

// parseFormatted reads a number written by format: digits and an optional
// k, M or G suffix.
func parseFormatted(s string) (float64, error) {
	scale := map[byte]float64{'k': 1e3, 'M': 1e6, 'G': 1e9}
	m := 1.0
	if n := len(s); n > 0 && scale[s[n-1]] != 0 {
		m, s = scale[s[n-1]], s[:n-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	return v * m, err
}
