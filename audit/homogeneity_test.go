package audit

import (
	"math"
	"testing"
)

// Equal shapes at any scale give 0; a known 2x2 table gives its textbook
// statistic; cells neither sample hit do not count.
func TestChiSquareTwoSample(t *testing.T) {
	if stat, dof := ChiSquareTwoSample([]int{10, 20, 30, 0}, []int{20, 40, 60, 0}); stat != 0 || dof != 2 {
		t.Fatalf("proportional histograms: %v, %d dof; want 0, 2", stat, dof)
	}
	// a = (30, 10), b = (10, 30): every expected count is 20, so
	// stat = 4 * 10^2 / 20 = 20.
	if stat, dof := ChiSquareTwoSample([]int{30, 10}, []int{10, 30}); math.Abs(stat-20) > 1e-9 || dof != 1 {
		t.Fatalf("2x2 table: %v, %d dof; want 20, 1", stat, dof)
	}
}
