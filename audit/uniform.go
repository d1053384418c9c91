package audit

import "gonum.org/v1/gonum/mathext"

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
// value): the inverse of ChiSquareP.
func ChiSquareCritical(dof int, p float64) float64 {
	return 2 * mathext.GammaIncRegCompInv(float64(dof)/2, p)
}

// Bin folds values in [0, n) into bins equal-width bins and counts them.
func Bin(values []uint64, n uint64, bins int) []int {
	out := make([]int, bins)
	for _, v := range values {
		out[v*uint64(bins)/n]++
	}
	return out
}

// SumRows sums cells in rows of len(cells)/rows: the reads per tree of a
// histogram of (tree, leaf bin) cells, say.
func SumRows(cells []int, rows int) []int {
	out := make([]int, rows)
	per := len(cells) / rows
	for i, c := range cells {
		out[i/per] += c
	}
	return out
}
