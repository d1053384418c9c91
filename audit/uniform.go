package audit

import "math"

// ChiSquareUniform returns Pearson's chi-square statistic of counts against
// the uniform distribution over len(counts) bins, and its degrees of
// freedom.
func ChiSquareUniform(counts []int) (stat float64, dof int) {
	total := 0
	for _, c := range counts {
		total += c
	}
	if len(counts) < 2 || total == 0 {
		return 0, 0
	}
	expected := float64(total) / float64(len(counts))
	for _, c := range counts {
		d := float64(c) - expected
		stat += d * d / expected
	}
	return stat, len(counts) - 1
}

// ChiSquareCritical returns the value a chi-square statistic with dof
// degrees of freedom exceeds with probability p (the upper critical
// value), by the Wilson-Hilferty approximation, which is within 1% for
// dof >= 10 and the p values tests use (0.01 to 0.0001).
func ChiSquareCritical(dof int, p float64) float64 {
	k := float64(dof)
	z := normalQuantile(1 - p)
	h := 2 / (9 * k)
	return k * math.Pow(1-h+z*math.Sqrt(h), 3)
}

// normalQuantile is the standard normal quantile function.
func normalQuantile(q float64) float64 { return math.Sqrt2 * math.Erfinv(2*q-1) }

// Bin folds values in [0, n) into bins equal-width bins and counts them.
func Bin(values []uint64, n uint64, bins int) []int {
	out := make([]int, bins)
	for _, v := range values {
		out[v*uint64(bins)/n]++
	}
	return out
}
