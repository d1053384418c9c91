package ringoram_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// TestSlotOffsets: the slot offsets that path reads fetch are uniform over
// the Z+S slots of a bucket (chi-square at audit.Significance), at the
// paper's Z=1, S=6, at Z=1, S=2 and at Z=2, S=3: a real block sits in a
// uniformly random slot and a dummy read takes a uniformly random valid
// dummy, so the offset read tells nothing of which slot held a block.
// With a rewrite that puts real blocks in the first free slots instead,
// the check fails decisively. The tree holds 300 blocks in 511 buckets, so
// that most paths pass buckets holding one.
func TestSlotOffsets(t *testing.T) {
	paper := ringoram.Params{Z: ringoram.PaperZ, S: ringoram.PaperS}
	for _, tc := range []struct {
		name       string
		p          ringoram.Params
		realsFirst bool
	}{
		{"Z=1,S=6", paper, false},
		{"Z=1,S=2", ringoram.Params{Z: 1, S: 2}, false},
		{"Z=2,S=3", ringoram.Params{Z: 2, S: 3}, false},
		{"reals in first slots", paper, true},
		{"reals in first slots, Z=1,S=2", ringoram.Params{Z: 1, S: 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := audit.Uniform("slot offsets of path reads", ringoram.RandomSlotOffsets(t, tc.p, tc.realsFirst))
			t.Log(c)
			switch {
			case !tc.realsFirst && !c.Pass():
				t.Error(c)
			case tc.realsFirst && !c.Decisive():
				t.Errorf("leak: %v; want a decisive failure", c)
			}
		})
	}
}
