package audit

import (
	"fmt"

	"github.com/oblivkv/oblivkv/observe"
)

// OneBatchPerTick checks a fixed batch schedule, such as Cloak's batch
// every Delta, driven by a clock the test controls: exactly one batch
// begins between each tick and the next, whatever the clients do. A batch
// is a record that isBatch selects (its first call); marks[i] is the
// number of records logged when tick i was delivered, and the batches of
// tick i are those among records[marks[i]:marks[i+1]] (the last tick's run
// to the end of records). A protocol that skips a batch when idle, or
// sends one early when requests pile up, fails it.
func OneBatchPerTick(name string, records []observe.Record, isBatch func(observe.Record) bool, marks []int) Check {
	var violations []string
	for i, from := range marks {
		to := len(records)
		if i+1 < len(marks) {
			to = marks[i+1]
		}
		n := 0
		for _, r := range records[from:to] {
			if isBatch(r) {
				n++
			}
		}
		if n != 1 {
			violations = append(violations, fmt.Sprintf("tick %d: %d batches", i, n))
		}
	}
	c := Exact(name, violations)
	if len(violations) == 0 {
		c.Detail = fmt.Sprintf("%d ticks, one batch each", len(marks))
	}
	return c
}
