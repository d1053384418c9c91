package audit

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/oblivkv/oblivkv/observe"
)

// Link relates one address that a batch read to the batch write that last
// wrote it, as storage sees both calls.
type Link struct {
	ReadPos  float64 // the address's place in the Read, as a share of the Read's addresses: [0, 1)
	WritePos float64 // its place in the Write that last wrote it, likewise
	Age      int     // batch Reads from that Write to this Read, this one included
}

// BatchLinks returns a Link for every address read by a batch Read that an
// earlier batch Write in records wrote. Batch calls are the Reads and
// Writes whose first address begins with prefix; addresses never written
// in records (before the log began) get no Link.
func BatchLinks(records []observe.Record, prefix string) []Link {
	type wrote struct {
		pos   float64
		reads int
	}
	last := map[string]wrote{}
	reads := 0
	var out []Link
	for _, r := range records {
		if r.Err || len(r.Addrs) == 0 || !strings.HasPrefix(r.Addrs[0], prefix) {
			continue
		}
		n := float64(len(r.Addrs))
		switch r.Op {
		case observe.OpRead:
			reads++
			for i, a := range r.Addrs {
				if w, ok := last[a]; ok {
					out = append(out, Link{ReadPos: float64(i) / n, WritePos: w.pos, Age: reads - w.reads})
				}
			}
		case observe.OpWrite:
			for i, a := range r.Addrs {
				last[a] = wrote{pos: float64(i) / n, reads: reads}
			}
		}
	}
	return out
}

// PositionChecks tests that where an address sits in the batch calls that
// read and wrote it tells storage nothing: its read position, its write
// position and its age are pairwise independent (Independent), positions
// in bins equal-width bins and ages in bins bins of about equal counts. A
// batch that lists its real queries before its fake ones, writes its
// dummies before its real objects, or chooses among equal candidates by
// their place in the write that made them, fails one of the three.
func PositionChecks(name string, links []Link, bins int) []Check {
	ageBin := quantileBins(links, bins)
	pos := func(p float64) int { return min(int(p*float64(bins)), bins-1) }
	tables := [3][][]int{}
	for i := range tables {
		tables[i] = make([][]int, bins)
		for j := range tables[i] {
			tables[i][j] = make([]int, bins)
		}
	}
	for _, l := range links {
		r, w, a := pos(l.ReadPos), pos(l.WritePos), ageBin(l.Age)
		tables[0][r][a]++
		tables[1][w][a]++
		tables[2][r][w]++
	}
	return []Check{
		Independent(name+": read position and age", tables[0]),
		Independent(name+": write position and age", tables[1]),
		Independent(name+": read and write positions", tables[2]),
	}
}

// quantileBins returns a function mapping an age to one of at most bins
// bins holding about equal numbers of the links' ages (ties keep one value
// in one bin).
func quantileBins(links []Link, bins int) func(int) int {
	ages := make([]int, len(links))
	for i, l := range links {
		ages[i] = l.Age
	}
	slices.Sort(ages)
	var cuts []int // an age a falls in the bin numbered by the cuts <= a
	for k := 1; k < bins && len(ages) > 0; k++ {
		c := ages[len(ages)*k/bins]
		if c > ages[0] && (len(cuts) == 0 || c > cuts[len(cuts)-1]) {
			cuts = append(cuts, c)
		}
	}
	return func(a int) int { return sort.SearchInts(cuts, a+1) }
}

// Sizes checks that every call calls selects has exactly want addresses:
// a batch whose size follows the requests fails it.
func Sizes(name string, records []observe.Record, calls func(observe.Record) bool, want int) Check {
	var violations []string
	n := 0
	for _, r := range records {
		if !calls(r) {
			continue
		}
		n++
		if len(r.Addrs) != want {
			violations = append(violations, fmt.Sprintf("call %d (%v) has %d addresses", r.Seq, r.Op, len(r.Addrs)))
		}
	}
	c := Exact(name, violations)
	if len(violations) == 0 {
		c.Detail = fmt.Sprintf("%d calls of %d addresses", n, want)
	}
	return c
}
