package ringoram

import "testing"

// RandomSlotOffsets runs 4,000 of the randomized test's random operations
// on a tree of p holding 300 blocks, with real blocks put in the first
// free slots when realsFirst, and returns how often path reads read each slot index:
// for TestSlotOffsets, which lives in package ringoram_test so that it can
// use package audit (which imports ringoram).
func RandomSlotOffsets(t *testing.T, p Params, realsFirst bool) []int {
	lk := noLeak
	if realsFirst {
		lk = leakRealsInFirstSlots
	}
	return randomized(t, p, 0, 4000, 300, lk).aud.offsets
}
