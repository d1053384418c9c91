package durable_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
)

// A store's log has a new incarnation at every open, a crash's recovery
// included; a log that keeps nothing has incarnation 0.
func TestLogIncarnation(t *testing.T) {
	f := newFixture(t)
	if got := f.log.Incarnation(); got != 1 {
		t.Fatalf("a new store's incarnation %d, want 1", got)
	}
	f.reopen() // a crash and a recovery
	f.reopen()
	if got := f.log.Incarnation(); got != 3 {
		t.Fatalf("incarnation after two reopens %d, want 3", got)
	}
	if got := durable.New(nil, mem.New(), f.keys).Incarnation(); got != 0 {
		t.Fatalf("a log without a journal has incarnation %d, want 0", got)
	}
}

// Every token of a later incarnation is above every token of an earlier
// one; within one, tokens follow the journal.
func TestFenceTokenOrder(t *testing.T) {
	ordered := [][2]uint64{ // incarnation, lsn: each token above the one before
		{0, 0}, {0, 1}, {0, durable.MaxFencedLSN},
		{1, 0}, {1, 7}, {1, durable.MaxFencedLSN},
		{2, 0},
		{durable.MaxIncarnation, 0}, {durable.MaxIncarnation, durable.MaxFencedLSN},
	}
	for i := 1; i < len(ordered); i++ {
		a, b := ordered[i-1], ordered[i]
		if ta, tb := durable.FenceToken(a[0], a[1]), durable.FenceToken(b[0], b[1]); ta >= tb {
			t.Errorf("FenceToken%v = %#x is not below FenceToken%v = %#x", a, ta, b, tb)
		}
	}
	if got := durable.FenceToken(3, 5); got != 3<<durable.LSNBits|5 {
		t.Errorf("FenceToken(3, 5) = %#x, want the incarnation above the position", got)
	}
}

// A token that would not grow any more is refused loudly.
func TestFenceTokenOutOfRange(t *testing.T) {
	for _, c := range [][2]uint64{{durable.MaxIncarnation + 1, 0}, {0, durable.MaxFencedLSN + 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("FenceToken%v did not panic", c)
				}
			}()
			durable.FenceToken(c[0], c[1])
		}()
	}
}
