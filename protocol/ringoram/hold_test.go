package ringoram

import (
	"errors"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
)

// A Write held until its record is durable (HoldUntil) goes out only once
// durable has returned nil, whether at Flush or with the next Read, and
// not at all while durable fails.
func TestHoldUntilDurable(t *testing.T) {
	f := newFixture(t, 3, defaults, 1)
	stored := func(addr string) bool {
		vals, err := f.mem.Read(f.ctx, []string{addr})
		if err != nil {
			t.Fatal(err)
		}
		return vals[0] != nil
	}
	errJournal := errors.New("journal down")
	journal, calls := errJournal, 0
	durable := func() error {
		calls++
		return journal
	}
	f.tr.HoldUntil([]backend.Item{{Addr: "held/1", Value: []byte("v")}}, durable)
	if err := f.tr.Flush(f.ctx); !errors.Is(err, errJournal) {
		t.Fatalf("Flush while the record is not durable: %v; want its error", err)
	}
	if stored("held/1") {
		t.Fatal("the Write went out while its record was not durable")
	}
	journal = nil
	if err := f.tr.Flush(f.ctx); err != nil || !stored("held/1") {
		t.Fatalf("Flush once the record is durable: %v, stored %v", err, stored("held/1"))
	}

	f.rawPut("other", []byte("x"))
	f.tr.HoldUntil([]backend.Item{{Addr: "held/2", Value: []byte("v")}}, durable)
	journal = errJournal
	if _, err := f.tr.read(f.ctx, []string{"other"}); !errors.Is(err, errJournal) || stored("held/2") {
		t.Fatalf("a Read while the held Write's record is not durable: %v, stored %v", err, stored("held/2"))
	}
	journal = nil
	if _, err := f.tr.read(f.ctx, []string{"other"}); err != nil || !stored("held/2") {
		t.Fatalf("a Read once the record is durable: %v, stored %v", err, stored("held/2"))
	}
	if calls != 4 {
		t.Fatalf("durable called %d times; want 4 (twice per Write, once failing)", calls)
	}
}
