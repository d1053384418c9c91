// Package plot draws the bar charts of `oblivkv bench --compare` as SVG
// files: one group of bars per protocol (one bar, or one per counter
// with a legend), labelled axes, each bar's value written above it, and
// a log scale, said on the axis, when the values span more than two
// decades. It writes the SVG by hand with encoding/xml, which escapes
// every label, so the files need no plotting library (docs/dependencies.md)
// and always parse as XML.
//
// Every bar is an SVG rect of class "bar" whose data-group attribute is
// its group's label and data-series its series ("" in a one-bar chart);
// a group with no bars shows its Absent text (class "absent") instead, so
// a missing figure never reads as a zero.
package plot

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Scale is how the value axis maps values to heights.
type Scale int

const (
	// Auto draws on a log scale when the positive values span more than
	// two decades (a largest value over 100 times the smallest), else
	// linearly.
	Auto Scale = iota
	// Linear starts at zero.
	Linear
	// Log spans whole decades from the one below half the smallest
	// positive value (so the smallest bar still shows) to the one above
	// the largest; a zero or negative value is drawn as a bar of no
	// height (its value still written).
	Log
)

// Chart is a bar chart: groups along the horizontal axis, each with its
// bars.
type Chart struct {
	Title string
	// YLabel names the value axis and its unit; ", log scale" is added
	// when the chart is drawn on a log scale.
	YLabel string
	Scale  Scale
	Groups []Group
	// SeriesNotes, optional, describes series in the legend.
	SeriesNotes map[string]string
}

// Group is one labelled place on the horizontal axis (a protocol).
type Group struct {
	Label string
	Bars  []Bar
	// Absent is written in place of the bars when Bars is empty, e.g.
	// "none reported".
	Absent string
}

// Bar is one value.
type Bar struct {
	// Series names what the bar measures when a group has several (a
	// counter's name): bars of one series share a colour, and the chart
	// gets a legend. Leave it empty in a one-bar-per-group chart.
	Series string
	Value  float64
	// Text is written above the bar; empty means Value with three
	// significant digits (12.3k, 1.05M).
	Text string
}

// Layout, in SVG user units (pixels).
const (
	left, right, top, bottom = 90, 20, 44, 40
	plotHeight               = 300
	barGap, groupGap         = 4, 28
	oneBarWidth, barWidth    = 44, 34
	charWidth                = 7 // of a 12px label, roughly
	legendRow, legendSwatch  = 18, 12
)

var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"}

// WriteSVG writes the chart as a standalone SVG document.
func (c Chart) WriteSVG(w io.Writer) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", " ")
	if err := enc.Encode(c.svg()); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// node is one SVG element.
type node struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []node
}

func el(name, text string, attrs ...any) node {
	n := node{XMLName: xml.Name{Local: name}, Text: text}
	for i := 0; i+1 < len(attrs); i += 2 {
		n.Attrs = append(n.Attrs, xml.Attr{Name: xml.Name{Local: attrs[i].(string)}, Value: attrValue(attrs[i+1])})
	}
	return n
}

func attrValue(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func text(x, y float64, s string, attrs ...any) node {
	return el("text", s, append([]any{"x", x, "y", y}, attrs...)...)
}

// svg lays the chart out.
func (c Chart) svg() node {
	series := c.series()
	ax := c.axis()
	bw := float64(oneBarWidth)
	if len(series) > 0 {
		bw = barWidth
	}
	widths := make([]float64, len(c.Groups))
	plotWidth := float64(groupGap)
	for i, g := range c.Groups {
		widths[i] = groupWidth(g, bw)
		plotWidth += widths[i] + groupGap
	}
	legendHeight := float64(legendRow * len(series))
	width := left + plotWidth + right
	for _, s := range series {
		width = max(width, left+legendSwatch+6+float64(charWidth*len(c.legend(s)))+right)
	}
	height := top + plotHeight + bottom + legendHeight + 8
	root := el("svg", "", "xmlns", "http://www.w3.org/2000/svg", "width", width, "height", height,
		"viewBox", fmt.Sprintf("0 0 %s %s", attrValue(width), attrValue(height)),
		"font-family", "sans-serif", "font-size", 12)
	add := func(n ...node) { root.Children = append(root.Children, n...) }
	add(el("title", c.Title), el("rect", "", "width", width, "height", height, "fill", "white"),
		text(width/2, 24, c.Title, "text-anchor", "middle", "font-size", 15, "font-weight", "bold"))

	// Value axis: grid lines, ticks and their values, the axis label.
	base := float64(top + plotHeight)
	for _, t := range ax.ticks() {
		y := base - ax.height(t)
		add(el("line", "", "x1", float64(left), "x2", left+plotWidth, "y1", y, "y2", y, "stroke", "#e0e0e0"),
			text(left-6, y+4, format(t), "text-anchor", "end", "class", "tick"))
	}
	add(el("line", "", "x1", float64(left), "x2", float64(left), "y1", float64(top), "y2", base, "stroke", "black"),
		el("line", "", "x1", float64(left), "x2", left+plotWidth, "y1", base, "y2", base, "stroke", "black"))
	yLabel := c.YLabel
	if ax.log {
		yLabel += ", log scale"
	}
	mid := float64(top) + plotHeight/2
	add(text(18, mid, yLabel, "text-anchor", "middle", "transform", fmt.Sprintf("rotate(-90 18 %s)", attrValue(mid)),
		"class", "axis-label"))

	// Groups: their bars (or what stands for none), values and labels.
	x := float64(left + groupGap)
	for i, g := range c.Groups {
		center := x + widths[i]/2
		if len(g.Bars) == 0 {
			add(text(center, base-plotHeight/2, g.Absent, "text-anchor", "middle", "font-style", "italic",
				"fill", "#777", "class", "absent", "data-group", g.Label))
		}
		bx := center - (float64(len(g.Bars))*(bw+barGap)-barGap)/2
		for _, b := range g.Bars {
			h := ax.height(b.Value)
			label := b.Text
			if label == "" {
				label = format(b.Value)
			}
			tip := g.Label + ": " + label
			if b.Series != "" {
				tip = g.Label + " " + b.Series + ": " + label
			}
			rect := el("rect", "", "class", "bar", "data-group", g.Label, "data-series", b.Series,
				"x", bx, "y", base-h, "width", bw, "height", h, "fill", palette[max(slices.Index(series, b.Series), 0)%len(palette)])
			rect.Children = []node{el("title", tip)}
			add(rect, text(bx+bw/2, base-h-4, label, "text-anchor", "middle", "font-size", 10, "class", "value"))
			bx += bw + barGap
		}
		add(text(center, base+18, g.Label, "text-anchor", "middle", "class", "label"))
		x += widths[i] + groupGap
	}

	// Legend: one row per series.
	for i, s := range series {
		y := base + bottom + float64(i*legendRow)
		add(el("rect", "", "x", float64(left), "y", y, "width", legendSwatch, "height", legendSwatch,
			"fill", palette[i%len(palette)]),
			text(left+legendSwatch+6, y+legendSwatch-1, c.legend(s), "class", "legend"))
	}
	return root
}

// legend is series s's line in the legend.
func (c Chart) legend(s string) string {
	if note := c.SeriesNotes[s]; note != "" {
		return s + ": " + note
	}
	return s
}

// series lists the bars' series names in order of first appearance, or
// nil when no bar names one.
func (c Chart) series() []string {
	var out []string
	for _, g := range c.Groups {
		for _, b := range g.Bars {
			if b.Series != "" && !slices.Contains(out, b.Series) {
				out = append(out, b.Series)
			}
		}
	}
	return out
}

// groupWidth is the width g takes with bars bw wide: its bars, or its
// label or Absent text if wider.
func groupWidth(g Group, bw float64) float64 {
	bars := float64(max(len(g.Bars), 1))*(bw+barGap) - barGap
	label := float64(charWidth * max(len(g.Label), len(g.Absent)))
	return max(bars, label)
}

// axis maps values to bar heights.
type axis struct {
	log    bool
	lo, hi float64 // linear: 0 and the top tick; log: the decades' exponents
	step   float64 // linear tick step
}

func (c Chart) axis() axis {
	lo, hi := math.Inf(1), 0.0
	for _, g := range c.Groups {
		for _, b := range g.Bars {
			if b.Value > 0 && !math.IsInf(b.Value, 0) {
				lo, hi = min(lo, b.Value), max(hi, b.Value)
			}
		}
	}
	if hi == 0 { // nothing positive to draw
		return axis{hi: 1, step: 0.2}
	}
	useLog := c.Scale == Log || c.Scale == Auto && hi/lo > 100
	if useLog {
		a := axis{log: true, lo: math.Floor(math.Log10(lo / 2)), hi: math.Ceil(math.Log10(hi))}
		if a.hi <= a.lo {
			a.hi = a.lo + 1
		}
		return a
	}
	step := niceStep(hi / 5)
	return axis{hi: step * math.Ceil(hi/step), step: step}
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func (a axis) height(v float64) float64 {
	if a.log {
		if v <= 0 {
			return 0
		}
		f := (math.Log10(v) - a.lo) / (a.hi - a.lo)
		return plotHeight * min(max(f, 0), 1)
	}
	return plotHeight * min(max(v, 0)/a.hi, 1)
}

func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for e := a.lo; e <= a.hi; e++ {
			out = append(out, math.Pow(10, e))
		}
		return out
	}
	for i := 0.0; i*a.step <= a.hi*(1+1e-9); i++ {
		out = append(out, i*a.step)
	}
	return out
}

// format writes v with three significant digits and a k, M or G suffix
// from a thousand up: 0.00123, 12.3, 1.23k, 12.3k, 1.05M.
func format(v float64) string {
	abs := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case abs >= 1e9:
		return trim(v/1e9) + "G"
	case abs >= 1e6:
		return trim(v/1e6) + "M"
	case abs >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

// trim writes v with three significant digits, at least as many as its
// integer part needs, and no trailing zeros.
func trim(v float64) string {
	digits := max(2-int(math.Floor(math.Log10(math.Abs(v)))), 0)
	s := strconv.FormatFloat(v, 'f', digits, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
