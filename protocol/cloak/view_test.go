package cloak

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/observe"
)

// With budgets [2 1] (beta 3) the sets hold 3 and 1 addresses: the layout
// writes set 2 ({d}) then set 1 ({a b c}); a batch then takes 2 of set 1
// and the 1 of set 2, and writes them back as the new set 1.
func TestViewBatches(t *testing.T) {
	p := func(s ...string) []string {
		for i := range s {
			s[i] = AddrPrefix + s[i]
		}
		return s
	}
	rec := func(op observe.Op, addrs []string) observe.Record { return observe.Record{Op: op, Addrs: addrs} }
	layout := []observe.Record{rec(observe.OpWrite, p("d")), rec(observe.OpWrite, p("a", "b", "c"))}
	good := append(layout, rec(observe.OpRead, p("a", "d", "b")), rec(observe.OpWrite, p("b", "a", "d")),
		// now set 1 = {a b d}, set 2 = {c}
		rec(observe.OpRead, p("c", "a", "d")), rec(observe.OpWrite, p("a", "c", "d")),
		rec(observe.OpWrite, []string{"ck/state"})) // not a physical address: ignored
	res, err := ViewBatches(good, []int{2, 1})
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
		res, err := ViewBatches(log, []int{2, 1})
		if err != nil || len(res.Violations) == 0 {
			t.Errorf("%s: %+v, %v; want a violation", name, res, err)
		}
	}
}

// cloakLog simulates Cloak's view for storage with budgets b: a layout of
// one Write per set, oldest first, then batches that each read b_d random
// addresses of every set d and write them back as the newest set. With
// pinned, the first address is read by every batch, as a key clients use
// all the time would be if the write-back left every element in place.
func cloakLog(b []int, batches int, pinned bool, seed uint64) []observe.Record {
	r := rand.New(rand.NewPCG(seed, 1))
	beta := 0
	for _, x := range b {
		beta += x
	}
	var recs []observe.Record
	var sets [][]string // sets[0] the newest
	next := 0
	for d := len(b); d >= 1; d-- {
		size := beta
		for _, x := range b[:d-1] {
			size -= x
		}
		set := make([]string, size)
		for i := range set {
			set[i] = fmt.Sprintf("%s%d", AddrPrefix, next)
			next++
		}
		sets = append([][]string{set}, sets...)
		recs = append(recs, observe.Record{Op: observe.OpWrite, Addrs: set})
	}
	hot := sets[0][0]
	for range batches {
		var read []string
		for d, set := range sets[:len(b)] {
			r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
			if i := slices.Index(set, hot); pinned && i >= 0 {
				set[0], set[i] = set[i], set[0]
			}
			read = append(read, set[:b[d]]...)
			sets[d] = set[b[d]:]
		}
		r.Shuffle(len(read), func(i, j int) { read[i], read[j] = read[j], read[i] })
		recs = append(recs, observe.Record{Op: observe.OpRead, Addrs: read}, observe.Record{Op: observe.OpWrite, Addrs: read})
		sets = append([][]string{slices.Clone(read)}, sets...)
	}
	return recs
}

// Streaks' expected count matches a simulation where it is large
// (runs of 2 and 3, within 5 standard deviations), it passes a log whose
// batches read at random and rejects decisively one that reads one
// address in every batch.
func TestStreaks(t *testing.T) {
	b := []int{8, 4, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}
	clean := cloakLog(b, 2000, false, 1)
	for _, length := range []int{2, 3} {
		count, expected, _ := streaks(clean, 8.0/26, length)
		t.Logf("runs of %d: %d counted, %.1f expected", length, count, expected)
		if math.Abs(float64(count)-expected) > 5*math.Sqrt(expected) {
			t.Errorf("runs of %d: %d counted, %.1f expected", length, count, expected)
		}
	}
	c := Streaks("random", clean, b, 10)
	t.Log(c)
	if !c.Pass() {
		t.Errorf("random batches: %v", c)
	}
	c = Streaks("pinned", cloakLog(b, 200, true, 2), b, 10)
	t.Log(c)
	if !c.Decisive() {
		t.Errorf("one address read by every batch: %v; want a decisive failure", c)
	}
}
