package audit

import (
	"testing"

	"github.com/oblivkv/oblivkv/observe"
)

// With budgets [2 1] (beta 3) the sets hold 3 and 1 addresses: the layout
// writes set 2 ({d}) then set 1 ({a b c}); a batch then takes 2 of set 1
// and the 1 of set 2, and writes them back as the new set 1.
func TestCloakBudgets(t *testing.T) {
	p := func(s ...string) []string {
		for i := range s {
			s[i] = CloakAddrPrefix + s[i]
		}
		return s
	}
	rec := func(op observe.Op, addrs []string) observe.Record { return observe.Record{Op: op, Addrs: addrs} }
	layout := []observe.Record{rec(observe.OpWrite, p("d")), rec(observe.OpWrite, p("a", "b", "c"))}
	good := append(layout, rec(observe.OpRead, p("a", "d", "b")), rec(observe.OpWrite, p("b", "a", "d")),
		// now set 1 = {a b d}, set 2 = {c}
		rec(observe.OpRead, p("c", "a", "d")), rec(observe.OpWrite, p("a", "c", "d")),
		rec(observe.OpWrite, []string{"ck/state"})) // not a physical address: ignored
	res, err := CloakBudgets(good, []int{2, 1})
	if err != nil || res.Batches != 2 || len(res.Violations) != 0 {
		t.Fatalf("good log: %+v, %v", res, err)
	}
	for name, log := range map[string][]observe.Record{
		"three from set 1": append(layout[:2:2], rec(observe.OpRead, p("a", "b", "c")), rec(observe.OpWrite, p("a", "b", "c"))),
		"never written":    append(layout[:2:2], rec(observe.OpRead, p("a", "b", "x")), rec(observe.OpWrite, p("a", "b", "x"))),
		"read twice":       append(layout[:2:2], rec(observe.OpRead, p("a", "a", "d")), rec(observe.OpWrite, p("a", "a", "d"))),
		"other write-back": append(layout[:2:2], rec(observe.OpRead, p("a", "b", "d")), rec(observe.OpWrite, p("a", "b", "c"))),
		"no write-back":    append(layout[:2:2], rec(observe.OpRead, p("a", "b", "d")), rec(observe.OpRead, p("c", "a", "d"))),
		"beyond the sets":  append(layout[:2:2], rec(observe.OpRead, p("a", "b", "d")), rec(observe.OpWrite, p("a", "b", "d")), rec(observe.OpWrite, p("a", "b", "d")), rec(observe.OpRead, p("a", "b", "c"))),
	} {
		res, err := CloakBudgets(log, []int{2, 1})
		if err != nil || len(res.Violations) == 0 {
			t.Errorf("%s: %+v, %v; want a violation", name, res, err)
		}
	}
}
