package oblivistore

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
)

// UnreadSlotChoices ranks each slot read among its level's unread slots,
// groups by level and by one slot of the level per call or several, and
// starts a level afresh at its write; a slot read again, or a level
// never written, gives no choice.
func TestUnreadSlotChoices(t *testing.T) {
	write := PartitionCall{Write: true, P: 3}
	for s := range levelSlots(1) {
		write.Slots = append(write.Slots, LevelSlot{L: 1, S: s})
	}
	calls := []PartitionCall{
		{P: 3, Slots: []LevelSlot{{L: 1, S: 0}}}, // not written yet
		write,
		{P: 3, Slots: []LevelSlot{{L: 1, S: 2}}},
		{P: 3, Slots: []LevelSlot{{L: 1, S: 3}, {L: 1, S: 0}}},
		{P: 3, Slots: []LevelSlot{{L: 1, S: 3}}}, // read again
		write,
		{P: 3, Slots: []LevelSlot{{L: 1, S: 3}}},
	}
	got := UnreadSlotChoices(calls)
	want := [][]audit.Choice{nil, nil, {{Rank: 2, Unread: 4}, {Rank: 3, Unread: 4}}, {{Rank: 2, Unread: 3}, {Rank: 0, Unread: 2}}}
	if len(got) != len(want) || !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// levelReads writes a level of 64 slots n times and reads it out after
// each write, one slot per call, in the order next gives.
func levelReads(n int, next func(r *rand.Rand, unread []int) int) []PartitionCall {
	r := rand.New(rand.NewPCG(17, 18))
	const l = 5
	var calls []PartitionCall
	for range n {
		w := PartitionCall{Write: true}
		unread := make([]int, levelSlots(l))
		for s := range unread {
			w.Slots = append(w.Slots, LevelSlot{L: l, S: s})
			unread[s] = s
		}
		calls = append(calls, w)
		for len(unread) > 0 {
			i := next(r, unread)
			calls = append(calls, PartitionCall{Slots: []LevelSlot{{L: l, S: unread[i]}}})
			unread = slices.Delete(unread, i, i+1)
		}
	}
	return calls
}

// A level read in a random order passes audit.ChoicesByGroup; one read lowest
// slot first one time in four fails it decisively.
func TestUnreadSlotChoicesUniform(t *testing.T) {
	random := func(r *rand.Rand, unread []int) int { return r.IntN(len(unread)) }
	lowish := func(r *rand.Rand, unread []int) int {
		if r.IntN(4) == 0 {
			return 0
		}
		return r.IntN(len(unread))
	}
	if c := audit.ChoicesByGroup("random", UnreadSlotChoices(levelReads(100, random)), 8); !c.Pass() {
		t.Errorf("a level read in a random order fails: %v", c)
	}
	if c := audit.ChoicesByGroup("lowest first", UnreadSlotChoices(levelReads(100, lowish)), 8); !c.Decisive() {
		t.Errorf("a level read lowest slot first one time in four passes: %v", c)
	}
}
