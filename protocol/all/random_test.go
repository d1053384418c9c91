package all_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	_ "github.com/oblivkv/oblivkv/protocol/all"
	"github.com/oblivkv/oblivkv/seal"
)

// The oblivious protocols draw the leaves, trees, slots, dummies,
// permutations and ids they choose from a source seeded by crypto/rand
// (a fixed seed only through an unexported test option), so nobody can
// predict them: two stores opened with default options, under the same
// sealing keys and fed the same requests, show storage different
// addresses. A protocol that seeded its choices with a constant, or from
// the keys, would show the same ones in both and fail it.
func TestDefaultRandomnessDiffers(t *testing.T) {
	keys := kvtest.NewKeys(t)
	for _, protocol := range []string{"pathoram", "taostore", "treebeard", "waffle", "cloak", "oblivistore"} {
		t.Run(protocol, func(t *testing.T) {
			a, b := addresses(t, protocol, keys), addresses(t, protocol, keys)
			if len(a) == 0 {
				t.Fatal("the requests read no address")
			}
			if slices.Equal(a, b) {
				t.Fatalf("two stores read the same %d addresses in the same order: their choices are predictable", len(a))
			}
			t.Logf("%d and %d addresses read; the first differ at %d", len(a), len(b), firstDifference(a, b))
		})
	}
}

// addresses opens a fresh store of protocol with default options, writes
// and reads 32 keys, closes it, and returns every address it read.
func addresses(t *testing.T, protocol string, keys *seal.Keys) []string {
	t.Helper()
	ctx := t.Context()
	var log observe.MemoryLog
	s, err := kv.Open(ctx, kv.Config{Protocol: protocol, Backend: mem.New(), Keys: keys,
		Capacity: 256, ValueSize: 16, TapLog: &log})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		if err := s.Put(ctx, fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 32 {
		if _, _, err := s.Get(ctx, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Batching protocols read on their own schedule.
	kvtest.WaitFor(t, "reads of the requests", func() bool { return len(reads(log.Records())) > 0 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return reads(log.Records())
}

// reads returns the addresses of every Read in records but those of the
// store's metadata record.
func reads(records []observe.Record) []string {
	var out []string
	for _, r := range records {
		if r.Op == observe.OpRead && r.Addrs[0] != kv.MetaAddr {
			out = append(out, r.Addrs...)
		}
	}
	return out
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
