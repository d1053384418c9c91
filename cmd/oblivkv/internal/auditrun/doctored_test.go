package auditrun

import (
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// doctorings change a clean run's log the way a broken implementation
// would have written it; each structural check must reject its case.
var doctorings = []struct {
	protocol, name, check string
	doctor                func(t *testing.T, r *Run)
}{
	{"treebeard", "a slot of another size", "slots of one size", func(t *testing.T, r *Run) {
		w := &r.Records[firstOf(t, r.Records, observe.OpWrite)]
		w.Sizes[len(w.Sizes)-1]++
	}},
	{"treebeard", "an eviction's Write dropped a bucket", "evictions in reverse-lexicographic order", func(t *testing.T, r *Run) {
		w, drop, l := largestEviction(t, r.Records)
		for i := len(w.Addrs) - 1; i >= 0; i-- { // every slot of one bucket the eviction evicts into
			if b, _, ok := l.ParseSlot(w.Addrs[i]); ok && b == drop {
				w.Addrs, w.Sizes = slices.Delete(w.Addrs, i, i+1), slices.Delete(w.Sizes, i, i+1)
			}
		}
	}},
	{"pathoram", "a write-back left out", "one read and one write of a path per access", func(t *testing.T, r *Run) {
		r.Records = slices.Delete(r.Records, 1, 2)
	}},
	{"taostore", "a write-back left out a bucket", "write-backs are whole stored paths", func(t *testing.T, r *Run) {
		w := &r.Records[firstOf(t, r.Records, observe.OpWrite)]
		w.Addrs, w.Sizes = w.Addrs[1:], w.Sizes[1:]
	}},
	{"oblivistore", "a slot read twice", "slots read once", func(t *testing.T, r *Run) {
		i := firstOf(t, r.Records, observe.OpRead)
		r.Records = slices.Insert(r.Records, i+1, r.Records[i])
	}},
	{"waffle", "an id written twice", "every id written once", func(t *testing.T, r *Run) {
		r.All = append(r.All, r.All[firstOf(t, r.All, observe.OpWrite)])
	}},
	{"cloak", "a batch took one address less", "b_d addresses from every set d", func(t *testing.T, r *Run) {
		read := &r.All[lastOf(t, r.All, observe.OpRead)]
		read.Addrs, read.Sizes = read.Addrs[1:], read.Sizes[1:]
	}},
}

// TestStructuralChecksRejectDoctoredLogs runs each protocol with
// structural checks once on the uniform workload, requires every check
// to pass, then doctors a copy of the log and requires the named check
// to fail on it.
func TestStructuralChecksRejectDoctoredLogs(t *testing.T) {
	for _, d := range doctorings {
		t.Run(d.protocol+"/"+d.name, func(t *testing.T) {
			cfg := Config{Protocol: d.protocol, Workloads: []string{"uniform"}, Ops: 600, Seed: 3}.withDefaults()
			r := runUniform(t, cfg)
			if c, ok := find(t, cfg, r, d.check); !ok || !c.Pass() {
				t.Fatalf("clean log: %v", c)
			}
			doctored := *r
			doctored.All = cloneRecords(r.All)
			doctored.Records = doctored.All[len(r.All)-len(r.Records):]
			d.doctor(t, &doctored)
			c, _ := find(t, cfg, &doctored, d.check)
			t.Log(c)
			if c.Pass() {
				t.Fatalf("the doctored log passes %q", c.Name)
			}
		})
	}
}

// runUniform runs cfg's protocol once on the uniform workload.
func runUniform(t *testing.T, cfg Config) *Run {
	t.Helper()
	keys, err := keysOf("uniform", cfg.Records, cfg.Ops, cfg.Clients, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	r, err := run(t.Context(), cfg, "uniform", keys)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// find runs the protocol's analysis on r and returns the check whose
// name holds check.
func find(t *testing.T, cfg Config, r *Run, check string) (audit.Check, bool) {
	t.Helper()
	a, err := specOf(cfg.Protocol).Analyse(r.view(cfg))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(a.Checks, func(c audit.Check) bool { return strings.Contains(c.Name, check) })
	if i < 0 {
		t.Fatalf("no check %q among %d", check, len(a.Checks))
	}
	return a.Checks[i], true
}

func cloneRecords(rs []observe.Record) []observe.Record {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Addrs, out[i].Sizes = slices.Clone(out[i].Addrs), slices.Clone(out[i].Sizes)
	}
	return out
}

func firstOf(t *testing.T, rs []observe.Record, op observe.Op) int {
	i := slices.IndexFunc(rs, func(r observe.Record) bool { return r.Op == op && len(r.Addrs) > 1 })
	if i < 0 {
		t.Fatalf("no %v of several addresses", op)
	}
	return i
}

func lastOf(t *testing.T, rs []observe.Record, op observe.Op) int {
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Op == op && len(rs[i].Addrs) > 1 {
			return i
		}
	}
	t.Fatalf("no %v of several addresses", op)
	return -1
}

// largestEviction returns the largest Write of a treebeard tree that
// ends an eviction (alone, or with a multi-path read before it), a bucket
// of the eviction's union and the tree's layout. The eviction's Read is
// the last Read of the tree before the Write, and takes as many slots of
// every bucket (Z), which a multi-path read does not: the paths crossing
// a bucket differ from one level to the next.
func largestEviction(t *testing.T, rs []observe.Record) (*observe.Record, uint64, ringoram.Layout) {
	t.Helper()
	var best *observe.Record
	var bucket uint64
	var layout ringoram.Layout
	lastRead := map[string]observe.Record{} // by tree prefix
	for i, r := range rs {
		if len(r.Addrs) == 0 || !strings.HasPrefix(r.Addrs[0], "tb/") {
			continue
		}
		l := ringoram.Layout{Prefix: r.Addrs[0][:strings.IndexByte(r.Addrs[0][len("tb/"):], '/')+len("tb/")+1]}
		if r.Op == observe.OpRead {
			lastRead[l.Prefix] = r
			continue
		}
		if b, ok := evictionRead(lastRead[l.Prefix], l); ok && r.Op == observe.OpWrite && (best == nil || len(r.Addrs) > len(best.Addrs)) {
			best, bucket, layout = &rs[i], b, l
		}
	}
	if best == nil {
		t.Fatal("no eviction in the run")
	}
	return best, bucket, layout
}

// evictionRead reports whether read takes as many slots of each of its
// buckets, two or more buckets, as an eviction's Read does, and returns
// one of them.
func evictionRead(read observe.Record, l ringoram.Layout) (uint64, bool) {
	per := map[uint64]int{}
	var last uint64
	for _, a := range read.Addrs {
		b, _, ok := l.ParseSlot(a)
		if !ok {
			return 0, false
		}
		per[b]++
		last = b
	}
	for _, n := range per {
		if n != per[last] {
			return 0, false
		}
	}
	return last, len(per) > 1
}
