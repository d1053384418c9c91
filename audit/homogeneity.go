package audit

// ChiSquareTwoSample is Pearson's chi-square test of homogeneity of two
// histograms over the same cells: are they draws of one distribution? It
// is how two workloads' adversary views are compared (DESIGN section 6).
// dof counts the cells either histogram hit, minus one; compare stat with
// ChiSquareCritical(dof, p).
func ChiSquareTwoSample(a, b []int) (stat float64, dof int) {
	var na, nb float64
	for i := range a {
		na, nb = na+float64(a[i]), nb+float64(b[i])
	}
	for i := range a {
		tot := float64(a[i] + b[i])
		if tot == 0 {
			continue
		}
		ea, eb := na*tot/(na+nb), nb*tot/(na+nb)
		da, db := float64(a[i])-ea, float64(b[i])-eb
		stat += da*da/ea + db*db/eb
		dof++
	}
	return stat, dof - 1
}
