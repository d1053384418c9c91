package kvtest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/seal"
)

// Choices runs one deterministic workload on a fresh store of a protocol
// and returns what storage saw of the store's random choices. options
// returns the protocol's Options: given a seed, with the protocol's
// test-only seed option set to it; given nil, the defaults, whose choices
// must begin at random.Fresh.
type Choices struct {
	Protocol string
	Options  func(seed *[32]byte) any
	// Drive issues the workload; nil: ChoicesRequests Puts of distinct
	// keys, then a Get of each, one at a time.
	Drive func(t *testing.T, s kv.Store)
	// Seen reduces the log to the choices; nil: the addresses of every
	// Read but the metadata record's, sorted (so that stores running
	// several goroutines, whose calls interleave as the scheduler lets
	// them, show the same list when they chose the same).
	Seen func(records []observe.Record) []string
}

// ChoicesRequests is how many keys the default workload writes and reads.
const ChoicesRequests = 32

// CheckFreshChoices runs c four times: two stores given one test seed
// must show storage the same choices, which shows that the workload and
// what is compared are deterministic, so that a difference below comes
// from the seed alone; two stores with default options must show
// different ones, so a default store's seed is not fixed. Every store has
// the same sealing keys. Then, in a subtest, the same with fixed: c with
// a leak that makes the default seed a constant, which must fail, so the
// check is shown to catch it.
func CheckFreshChoices(t *testing.T, c, fixed Choices) {
	if err := FreshChoices(t, c); err != nil {
		t.Error(err)
	}
	t.Run("fixed seed (leak)", func(t *testing.T) {
		err := FreshChoices(t, fixed)
		if err == nil {
			t.Fatal("two default stores whose seed is a constant passed")
		}
		t.Log(err)
	})
}

// FreshChoices is CheckFreshChoices returning what went wrong with the
// default stores (a failure of the seeded ones is fatal: it is the test's).
func FreshChoices(t *testing.T, c Choices) error {
	t.Helper()
	keys := NewKeys(t)
	seed := [32]byte{7}
	a, b := c.run(t, keys, &seed), c.run(t, keys, &seed)
	if len(a) == 0 {
		t.Fatal("the workload showed storage no choices")
	}
	if i := firstDifference(a, b); i >= 0 {
		t.Fatalf("two stores with one test seed showed storage different choices (%d and %d, first apart at %d): the workload or what is compared is not deterministic", len(a), len(b), i)
	}
	x, y := c.run(t, keys, nil), c.run(t, keys, nil)
	if firstDifference(x, y) < 0 {
		return fmt.Errorf("%s: two stores with default options showed storage the same %d choices: their seed is fixed", c.Protocol, len(x))
	}
	t.Logf("%s: %d choices, the same under one test seed; two default stores first differ at %d", c.Protocol, len(a), firstDifference(x, y))
	return nil
}

func (c Choices) run(t *testing.T, keys *seal.Keys, seed *[32]byte) []string {
	t.Helper()
	var log observe.MemoryLog
	s, err := kv.Open(t.Context(), kv.Config{Protocol: c.Protocol, Backend: mem.New(), Keys: keys,
		Capacity: 256, ValueSize: 16, Options: c.Options(seed), TapLog: &log})
	if err != nil {
		t.Fatal(err)
	}
	if c.Drive != nil {
		c.Drive(t, s)
	} else {
		SerialWorkload(t, s, func(op func() error) error { return op() })
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c.Seen != nil {
		return c.Seen(log.Records())
	}
	return sortedReads(log.Records())
}

// SerialWorkload is Choices' default workload: ChoicesRequests Puts of
// distinct keys, then a Get of each, one at a time, each run by do (which
// may drive the store while it waits).
func SerialWorkload(t *testing.T, s kv.Store, do func(op func() error) error) {
	t.Helper()
	for i := range 2 * ChoicesRequests {
		key := fmt.Sprint("k", i%ChoicesRequests)
		err := do(func() error {
			if i < ChoicesRequests {
				return s.Put(t.Context(), key, []byte("v"))
			}
			_, _, err := s.Get(t.Context(), key)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sortedReads is Choices' default view: the addresses of every Read but
// the metadata record's, sorted.
func sortedReads(records []observe.Record) []string {
	var out []string
	for _, r := range records {
		if r.Op == observe.OpRead && r.Addrs[0] != kv.MetaAddr {
			out = append(out, r.Addrs...)
		}
	}
	slices.Sort(out)
	return out
}

// firstDifference is the first index where a and b differ, or -1.
func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
