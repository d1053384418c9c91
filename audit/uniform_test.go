package audit

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The critical values of the chi-square distribution from standard tables.
func TestChiSquareCritical(t *testing.T) {
	for _, tc := range []struct {
		dof  int
		p    float64
		want float64
	}{{63, 0.001, 103.44}, {63, 0.01, 92.01}, {15, 0.001, 37.70}, {255, 0.001, 330.52}} {
		if got := ChiSquareCritical(tc.dof, tc.p); math.Abs(got-tc.want)/tc.want > 0.01 {
			t.Errorf("critical(%d, %v) = %.2f, want %.2f", tc.dof, tc.p, got, tc.want)
		}
	}
}

// The test accepts uniform samples and rejects skewed ones.
func TestChiSquareUniformSeparates(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	uniform, skewed := make([]uint64, 20000), make([]uint64, 20000)
	for i := range uniform {
		uniform[i] = r.Uint64N(1024)
		skewed[i] = r.Uint64N(1024)
		if i%20 == 0 {
			skewed[i] = 7 // 5% extra on one value
		}
	}
	crit := ChiSquareCritical(63, 0.001)
	if stat, dof := ChiSquareUniform(Bin(uniform, 1024, 64)); stat > crit || dof != 63 {
		t.Fatalf("uniform sample rejected: %.1f > %.1f (%d degrees of freedom, want 63)", stat, crit, dof)
	}
	if stat, _ := ChiSquareUniform(Bin(skewed, 1024, 64)); stat < crit {
		t.Fatalf("skewed sample accepted: %.1f < %.1f", stat, crit)
	}
}
