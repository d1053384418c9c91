package audit

import "math"

// Histogram counts integer samples in bins of width 1: Counts[v] is how
// many samples equal v (samples are never negative).
type Histogram struct {
	Counts []int
}

// Add counts one sample of value v >= 0.
func (h *Histogram) Add(v int) {
	for len(h.Counts) <= v {
		h.Counts = append(h.Counts, 0)
	}
	h.Counts[v]++
}

// Total is the number of samples.
func (h Histogram) Total() int {
	n := 0
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Rebin folds the histogram into bins of the given width: bin i of the
// result counts the samples in [i*width, (i+1)*width).
func (h Histogram) Rebin(width int) Histogram {
	if width <= 1 {
		return Histogram{Counts: append([]int(nil), h.Counts...)}
	}
	out := Histogram{Counts: make([]int, (len(h.Counts)+width-1)/width)}
	for v, c := range h.Counts {
		out.Counts[v/width] += c
	}
	return out
}

// TotalVariation is the total variation distance between the normalised
// histograms a and b, half the sum over bins of |p_a - p_b|: the share of
// samples whose value would have to change to turn one distribution into
// the other (0 for equal shapes, 1 for disjoint ones). It is 0 when either
// histogram is empty.
func TotalVariation(a, b Histogram) float64 {
	na, nb := a.Total(), b.Total()
	if na == 0 || nb == 0 {
		return 0
	}
	d := 0.0
	for i := range max(len(a.Counts), len(b.Counts)) {
		var pa, pb float64
		if i < len(a.Counts) {
			pa = float64(a.Counts[i]) / float64(na)
		}
		if i < len(b.Counts) {
			pb = float64(b.Counts[i]) / float64(nb)
		}
		d += math.Abs(pa - pb)
	}
	return d / 2
}
