package oblivistore

import (
	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/audit/auditspec"
)

// auditSpec is ObliviStore's registration with `oblivkv audit`: its
// clients run freely, and analyse makes the checks of storage's view
// that the Tap alone supports.
var auditSpec = &auditspec.Spec{
	Prefixes: []string{SlotPrefix},
	Analyse:  analyse,
}

// choiceBins is the number of bins of the ranks of slot choices that
// the audit tests against the uniform choice.
const choiceBins = 8

// analyse makes ObliviStore's audits that the Tap alone supports: no
// slot read twice between two writes of its level, every write of whole
// levels (SlotsReadOnce, the hierarchical ORAM's rule, ObliviStore Sec.
// III-B); every slot read uniform among its level's slots not read since
// the level was written (UnreadSlotChoices: a level written unpermuted,
// or dummies read in order, fail it); and, across workloads, how many
// slots a read takes. The audit test's other checks (every request reads
// one slot of every readable level, partitions uniform) need the proxy's
// word on which reads are requests' (TapPartitionCalls says why).
func analyse(r auditspec.Run) (auditspec.Analysis, error) {
	calls, err := TapPartitionCalls(r.All, SlotPrefix)
	n := r.Workload + ": "
	if err != nil {
		return auditspec.Analysis{Checks: []audit.Check{audit.ExactErr(n+"storage's view parses as partition reads and writes", err)}}, nil
	}
	checks := []audit.Check{
		SlotsReadOnce(n+"slots read once", calls),
		audit.ChoicesByGroup(n+"slots read uniform among the unread", UnreadSlotChoices(calls), choiceBins),
	}
	return auditspec.Analysis{Checks: checks, Compared: map[string][]int{"slots per read": slotsPerRead(calls)}}, nil
}

// slotsPerRead is the histogram of how many slots each read takes.
func slotsPerRead(calls []PartitionCall) []int {
	var slots []int
	for _, c := range calls {
		if !c.Write {
			for len(slots) <= len(c.Slots) {
				slots = append(slots, 0)
			}
			slots[len(c.Slots)]++
		}
	}
	return slots
}
