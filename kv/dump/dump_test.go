package dump_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/dump"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/kv/kvtest/fixture"
	"github.com/oblivkv/oblivkv/observe"
	_ "github.com/oblivkv/oblivkv/protocol/all"
)

const (
	capacity   = 256
	valueSize  = 64
	maxKeySize = 32
)

// openStore opens an empty store of protocol over memory, its backend
// calls recorded in the returned log.
func openStore(t *testing.T, protocol string) (kv.Store, *observe.MemoryLog) {
	t.Helper()
	log := &observe.MemoryLog{}
	s, err := kv.Open(context.Background(), kv.Config{Protocol: protocol, Backend: mem.New(), Keys: kvtest.NewKeys(t),
		Capacity: capacity, ValueSize: valueSize, MaxKeySize: maxKeySize, TapLog: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, log
}

// fill puts n keys, deletes one more and overwrites one, and returns what
// the store holds.
func fill(t *testing.T, s kv.Store, n int) map[string]string {
	t.Helper()
	ctx := context.Background()
	want := map[string]string{}
	for i := range n + 1 {
		key, val := fmt.Sprintf("key-%d", i), fmt.Sprintf("value-%d", i)
		if err := s.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
		want[key] = val
	}
	gone := fmt.Sprintf("key-%d", n)
	if err := s.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	delete(want, gone)
	if err := s.Put(ctx, "key-0", nil); err != nil {
		t.Fatal(err)
	}
	want["key-0"] = ""
	return want
}

// call is one backend call as storage sees it, less its addresses.
type call struct {
	op    observe.Op
	addrs int
	sizes string
}

// dumpAll dumps s and returns what it gave, the backend calls it made
// (each as its kind, its number of addresses and their sizes) and the
// number of Gets it issued.
func dumpAll(t *testing.T, s kv.Store, log *observe.MemoryLog) (map[string]string, []call, uint64) {
	t.Helper()
	got := map[string]string{}
	log.Reset()
	before := s.Stats().Gets
	n, err := dump.All(context.Background(), s, func(key string, val []byte) error {
		if _, dup := got[key]; dup {
			t.Errorf("key %q dumped twice", key)
		}
		got[key] = string(val)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gets := s.Stats().Gets - before
	if n != len(got) {
		t.Errorf("All returned %d, gave %d records", n, len(got))
	}
	var calls []call
	for _, r := range log.Records() {
		calls = append(calls, call{op: r.Op, addrs: len(r.Addrs), sizes: fmt.Sprint(r.Sizes)})
	}
	return got, calls, gets
}

// TestDumpViewIndependentOfKeyCount dumps stores of 3 and of 200 keys.
// Each dump issues exactly Capacity Gets and gives back every key and
// value. For waffle, whose batches have a fixed shape, storage sees the
// same calls (kinds, addresses per call, sizes) whatever the number of
// keys; how many batches it sees depends on timing (a batch a timeout
// closes holds fewer real queries), so the kinds of call are compared,
// not their count. (Cloak's batches leave at a fixed rate, so how many
// storage sees depends only on how long the dump takes; oblivistore's
// shuffles depend on the store's history, which the audit judges; so do
// when the tree protocols checkpoint, and when taostore writes back and
// treebeard's epochs end.)
func TestDumpViewIndependentOfKeyCount(t *testing.T) {
	for _, tc := range []struct {
		protocol  string
		exactView bool
	}{
		{"waffle", true},
		{"cloak", false},
		{"oblivistore", false},
		{"pathoram", false},
		{"taostore", false},
		{"treebeard", false},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			var views [][]call
			for _, n := range []int{3, 200} {
				s, log := openStore(t, tc.protocol)
				want := fill(t, s, n)
				got, calls, gets := dumpAll(t, s, log)
				if !maps.Equal(got, want) {
					t.Fatalf("%d keys: dump gave %d records, want %d: %v", n, len(got), len(want), got)
				}
				if gets != capacity {
					t.Errorf("%d keys: dump issued %d Gets, want the capacity %d", n, gets, capacity)
				}
				views = append(views, calls)
			}
			if !tc.exactView {
				return
			}
			if len(views[0]) == 0 {
				t.Fatal("the dump made no backend call")
			}
			if a, b := kinds(views[0]), kinds(views[1]); !slices.Equal(a, b) {
				t.Fatalf("storage saw different calls: %v with 3 keys, %v with 200", a, b)
			}
		})
	}
}

// TestPlanNamesEveryKeyAndAbsentOnes: a plan holds Capacity distinct
// names, every stored key among them, the others valid names (within the
// maximum key size) the store does not hold; two plans are in different
// orders.
func TestPlanNamesEveryKeyAndAbsentOnes(t *testing.T) {
	s, _ := openStore(t, "plain")
	want := fill(t, s, 100)
	first, err := dump.Plan(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	second, err := dump.Plan(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != capacity || len(slices.Compact(slices.Sorted(slices.Values(first)))) != capacity {
		t.Fatalf("plan of %d names, %d distinct; want %d", len(first), len(slices.Compact(slices.Sorted(slices.Values(first)))), capacity)
	}
	stored := 0
	for _, name := range first {
		if _, ok := want[name]; ok {
			stored++
		} else if len(name) == 0 || len(name) > maxKeySize {
			t.Fatalf("absent name of %d bytes; the store takes 1 to %d", len(name), maxKeySize)
		}
	}
	if stored != len(want) {
		t.Fatalf("plan names %d stored keys, want %d", stored, len(want))
	}
	if slices.Equal(first, second) {
		t.Fatal("two plans in the same order")
	}
}

// TestDumpRefusesProtocolsThatCannotNameKeys: a protocol that does not
// name its keys (the test fixture; every protocol of package all does) is
// refused before any Get.
func TestDumpRefusesProtocolsThatCannotNameKeys(t *testing.T) {
	s, _ := openStore(t, fixture.Name)
	_, err := dump.All(context.Background(), s, func(string, []byte) error { return nil })
	if !errors.Is(err, dump.ErrCannotName) {
		t.Errorf("dump = %v, want ErrCannotName", err)
	}
	if gets := s.Stats().Gets; gets != 0 {
		t.Errorf("refused dump issued %d Gets", gets)
	}
}

// kinds returns the distinct calls of a view, in a fixed order.
func kinds(calls []call) []call {
	seen := map[call]bool{}
	var out []call
	for _, c := range calls {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b call) int {
		return cmp.Or(cmp.Compare(a.op, b.op), cmp.Compare(a.addrs, b.addrs), cmp.Compare(a.sizes, b.sizes))
	})
	return out
}
