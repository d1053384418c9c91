package ringoram_test

import (
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// Names of slotChecks' checks.
const (
	offsetsCheck    = "slot offsets of path reads"
	landCheck       = "rewrites: slots real blocks land in uniform"
	orderCheck      = "rewrites: slot independent of gathering order"
	dummiesCheck    = "dummies path reads take, among their buckets' unread dummies"
	tapChoicesCheck = "slots path reads take, among their buckets' unread slots (storage's view)"
)

// slotChecks are the audits of where slots lie on a randomized run
// (ringoram.RandomSlots) of a tree of p:
//
//   - the slot offsets path reads fetch are uniform over the Z+S slots;
//   - where each rewrite (eviction, early reshuffle) put each real block,
//     by the trusted metadata: uniform over the bucket's slots, and
//     independent of the order the rewrite took the blocks in
//     (audit.Placements; with Z = 1 there is no order, and the second
//     does not apply);
//   - which dummy each path read took, by the trusted metadata: uniform
//     among the bucket's valid dummies (audit.Choices);
//   - from storage's view alone, which slot each path read took:
//     uniform among the slots of its bucket not read since the bucket was
//     last written (ringoram.Choices).
func slotChecks(t *testing.T, p ringoram.Params, run ringoram.SlotRun) []audit.Check {
	slots := p.Z + p.S
	placed := make([]audit.Placement, len(run.Placed))
	for i, x := range run.Placed {
		placed[i] = audit.Placement(x)
	}
	chose := make([]audit.Choice, len(run.Chose))
	for i, x := range run.Chose {
		chose[i] = audit.Choice(x)
	}
	ops, err := ringoram.View(run.Records, run.Layout, p.Z)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Concat(
		[]audit.Check{audit.Uniform(offsetsCheck, run.Offsets)},
		audit.Placements("rewrites", placed, slots),
		[]audit.Check{
			audit.Choices(dummiesCheck, chose, slots),
			audit.Choices(tapChoicesCheck, ringoram.Choices([][]ringoram.Op{ops}, slots), slots),
		})
}

// TestSlotOffsets runs slotChecks at the paper's Z=1, S=6, at Z=1, S=2
// and Z=2, S=3, and at Treebeard's default Z=4, S=10: a real block sits
// in a uniformly random slot and a dummy read takes a uniformly random
// valid dummy, so every check passes. With a rewrite that puts real
// blocks in the first free slots (leakRealsInFirstSlots), or path reads
// that take the lowest unread dummy (leakDummiesInOrder), the checks
// named fail decisively. The tree holds 300 blocks in 511 buckets, so
// that most paths pass buckets holding one. Runs of 4,000 operations
// where a check needs them (the offsets under leakRealsInFirstSlots at
// Z=1, S=6 fail by p = 4e-19 at 4,000), 2,000 for the small buckets
// without a leak, 1,000 elsewhere.
func TestSlotOffsets(t *testing.T) {
	paper := ringoram.Params{Z: ringoram.PaperZ, S: ringoram.PaperS}
	treebeard := ringoram.Params{Z: 4, S: 10}
	for _, tc := range []struct {
		name     string
		p        ringoram.Params
		ops      int
		leak     ringoram.Leak
		decisive []string // the checks that must fail decisively; none: every check must pass
	}{
		{"Z=1,S=6", paper, 2000, ringoram.NoLeak, nil},
		{"Z=1,S=2", ringoram.Params{Z: 1, S: 2}, 2000, ringoram.NoLeak, nil},
		{"Z=2,S=3", ringoram.Params{Z: 2, S: 3}, 2000, ringoram.NoLeak, nil},
		{"Z=4,S=10", treebeard, 1000, ringoram.NoLeak, nil},
		{"reals in first slots", paper, 4000, ringoram.LeakRealsInFirstSlots, []string{offsetsCheck, landCheck, tapChoicesCheck}},
		{"reals in first slots, Z=1,S=2", ringoram.Params{Z: 1, S: 2}, 4000, ringoram.LeakRealsInFirstSlots, []string{offsetsCheck, landCheck, tapChoicesCheck}},
		{"reals in first slots, Z=4,S=10", treebeard, 1000, ringoram.LeakRealsInFirstSlots, []string{offsetsCheck, landCheck, orderCheck, tapChoicesCheck}},
		{"dummies in order", paper, 1000, ringoram.LeakDummiesInOrder, []string{dummiesCheck, tapChoicesCheck}},
		{"dummies in order, Z=4,S=10", treebeard, 1000, ringoram.LeakDummiesInOrder, []string{dummiesCheck, tapChoicesCheck}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range slotChecks(t, tc.p, ringoram.RandomSlots(t, tc.p, tc.ops, tc.leak)) {
				t.Log(c)
				switch must := slices.Contains(tc.decisive, c.Name); {
				case must && !c.Decisive():
					t.Errorf("leak: %v; want a decisive failure", c)
				case tc.decisive == nil && !c.Pass():
					t.Error(c)
				}
			}
		})
	}
}
