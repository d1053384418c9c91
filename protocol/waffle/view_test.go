package waffle

import (
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/observe"
)

func rec(op observe.Op, addrs ...string) observe.Record {
	return observe.Record{Op: op, Addrs: addrs}
}

func TestAlpha(t *testing.T) {
	const p = ObjectPrefix
	failedState, failedScan := rec(observe.OpWrite, "wf/state"), rec(observe.OpScan, p)
	failedState.Err, failedScan.Err = true, true
	log := []observe.Record{
		rec(observe.OpWrite, p+"a", p+"b", p+"c", p+"x"), // batch 0 (load)
		rec(observe.OpDelete, p+"x"),                     // deleted unread
		failedScan,                                       // not an object call
		rec(observe.OpRead, "wf/state"),                  // not a batch
		failedState,                                      // not an object call
		rec(observe.OpRead, p+"a"),                       // batch 1: a alpha 1
		rec(observe.OpWrite, p+"d"),
		rec(observe.OpDelete, p+"a"),
		rec(observe.OpRead, p+"b", p+"d"), // batch 2: b 2, d 1
		rec(observe.OpWrite, p+"e", p+"f"),
		rec(observe.OpDelete, p+"b", p+"d"),
		rec(observe.OpRead, p+"e"), // batch 3: e 1; c (0) and f (2) unread
		rec(observe.OpWrite, "wf/state"),
	}
	a, err := Alpha(log)
	if err != nil {
		t.Fatal(err)
	}
	if a.Batches != 3 || a.Max != 2 || a.DeletedUnread != 1 || a.MaxUnreadAge != 3 {
		t.Fatalf("got %+v", a)
	}
	var alphas []int
	for _, s := range a.Samples {
		alphas = append(alphas, s.Alpha)
	}
	if !reflect.DeepEqual(alphas, []int{1, 2, 1, 1}) || !reflect.DeepEqual(a.Hist.Counts, []int{0, 3, 1}) {
		t.Fatalf("alphas %v hist %v", alphas, a.Hist.Counts)
	}
	want := []AlphaSample{{Addr: p + "c", Written: 0, Read: -1, Alpha: 3}, {Addr: p + "f", Written: 2, Read: -1, Alpha: 1}}
	if !reflect.DeepEqual(a.Unread, want) {
		t.Fatalf("unread %+v; want %+v", a.Unread, want)
	}
}

func TestAlphaErrors(t *testing.T) {
	const p = ObjectPrefix
	failed := rec(observe.OpRead, p+"a")
	failed.Err = true
	for name, log := range map[string][]observe.Record{
		"never written": {rec(observe.OpRead, p+"a")},
		"read twice":    {rec(observe.OpWrite, p+"a"), rec(observe.OpRead, p+"a"), rec(observe.OpRead, p+"a")},
		"written twice": {rec(observe.OpWrite, p+"a"), rec(observe.OpWrite, p+"a")},
		"rewritten":     {rec(observe.OpWrite, p+"a"), rec(observe.OpRead, p+"a"), rec(observe.OpWrite, p+"a")},
		"failed call":   {rec(observe.OpWrite, p+"a"), failed},
	} {
		if _, err := Alpha(log); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestBeta(t *testing.T) {
	ev := []Event{
		{Written: []string{"k1"}},                           // 0: write without a read: no sample
		{Read: []string{"k1", "d"}, Written: []string{"d"}}, // 1: d beta 0
		{Read: []string{"k2"}},                              // 2
		{Written: []string{"k2"}},                           // 3: k2 beta 1
		{Written: []string{"k1"}, Read: []string{"k3"}},     // 4: k1 beta 3; k3 pending
		{Read: []string{"k2"}},                              // 5
		{Read: []string{"k2"}},                              // 6: reread
	}
	b := Beta(ev)
	var betas []int
	for _, s := range b.Samples {
		betas = append(betas, s.Beta)
	}
	if !reflect.DeepEqual(betas, []int{0, 1, 3}) || b.Min != 0 || b.Pending != 2 || b.Reread != 1 ||
		!reflect.DeepEqual(b.Hist.Counts, []int{1, 1, 0, 1}) {
		t.Fatalf("betas %v, got %+v", betas, b)
	}
	if b := Beta(nil); b.Min != -1 || len(b.Samples) != 0 {
		t.Fatalf("empty: %+v", b)
	}
}

// FreshIDs passes a log in which every id is written once and read
// at most once, and counts every breach of that rule.
func TestFreshIDs(t *testing.T) {
	const p = ObjectPrefix
	failed := rec(observe.OpWrite, p+"z")
	failed.Err = true
	clean := []observe.Record{
		rec(observe.OpWrite, p+"a", p+"b", p+"c"),
		rec(observe.OpRead, "wf/state"), // not an object call
		rec(observe.OpRead, p+"a", p+"b"),
		rec(observe.OpWrite, p+"d", p+"e"),
		rec(observe.OpDelete, p+"a", p+"b", p+"a"), // deletes are not judged
		rec(observe.OpRead, p+"d"),
	}
	if c := FreshIDs("clean", clean); !c.Pass() || c.P != 1 {
		t.Fatalf("clean log: %v", c)
	}
	leaky := append(clean,
		rec(observe.OpWrite, p+"a"),       // written after its read
		rec(observe.OpWrite, p+"c"),       // written twice, never read
		rec(observe.OpRead, p+"a", p+"x"), // read twice; x never written
		failed,                            // a failed call
	)
	c := FreshIDs("leaky", leaky)
	if c.Stat != 5 || !c.Decisive() {
		t.Fatalf("leaky log: %v; want 5 violations", c)
	}
}

// AlphaBound fails on every id read later than the bound, and on
// every id left unread at least the bound's age.
func TestAlphaBound(t *testing.T) {
	a := AlphaResult{
		Batches: 10,
		Samples: []AlphaSample{{Addr: "wf/o/a", Written: 0, Read: 3, Alpha: 3}, {Addr: "wf/o/b", Written: 2, Read: 6, Alpha: 4}},
		Max:     4,
		Unread:  []AlphaSample{{Addr: "wf/o/c", Written: 6, Read: -1, Alpha: 4}, {Addr: "wf/o/d", Written: 8, Read: -1, Alpha: 2}},
	}
	for _, tc := range []struct {
		bound, violations int
	}{{5, 0}, {4, 1}, {3, 2}, {2, 4}} {
		c := AlphaBound("alpha", a, tc.bound)
		if int(c.Stat) != tc.violations || c.Pass() != (tc.violations == 0) {
			t.Errorf("bound %d: %v; want %d violations", tc.bound, c, tc.violations)
		}
	}
}

// IDPrefixes passes 20,000 random ids and fails decisively ids whose
// first half is fixed per key (100 keys) and whose rest is fresh.
func TestIDPrefixes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	id := func(prefix uint64) string {
		b := binary.BigEndian.AppendUint64(nil, prefix)
		return ObjectPrefix + string(binary.BigEndian.AppendUint64(b, r.Uint64()))
	}
	var fresh, keyed []string
	for i := range 20000 {
		fresh = append(fresh, id(r.Uint64()))
		keyed = append(keyed, id(uint64(i%100)*0x9e3779b97f4a7c15))
	}
	if c := IDPrefixes("fresh", []observe.Record{rec(observe.OpWrite, fresh...)}); !c.Pass() {
		t.Errorf("random ids: %v", c)
	}
	if c := IDPrefixes("keyed", []observe.Record{rec(observe.OpWrite, keyed...)}); !c.Decisive() {
		t.Errorf("ids keyed in part: %v", c)
	}
}
