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
	stored := f.stored
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
	if _, err := f.tr.read(f.ctx, []string{"other"}, true); !errors.Is(err, errJournal) || stored("held/2") {
		t.Fatalf("a Read while the held Write's record is not durable: %v, stored %v", err, stored("held/2"))
	}
	journal = nil
	if _, err := f.tr.read(f.ctx, []string{"other"}, true); err != nil || !stored("held/2") {
		t.Fatalf("a Read once the record is durable: %v, stored %v", err, stored("held/2"))
	}
	if calls != 4 {
		t.Fatalf("durable called %d times; want 4 (twice per Write, once failing)", calls)
	}
}

// Writes held one after the other go out together with the next Read
// that carries them, and a Read of an operation beside others carries
// none; Writes given back by a Read that failed go ahead of those held
// since.
func TestHeldWritesGoWithOneRead(t *testing.T) {
	f := newFixture(t, 3, defaults, 1)
	stored := f.stored
	f.rawPut("other", []byte("x"))
	f.tr.Hold([]backend.Item{{Addr: "held/1", Value: []byte("v")}})
	f.tr.Hold([]backend.Item{{Addr: "held/2", Value: []byte("v")}})
	if _, err := f.tr.read(f.ctx, []string{"other"}, false); err != nil || stored("held/1") || stored("held/2") {
		t.Fatalf("a Read beside others: %v; stored %v, %v: want neither", err, stored("held/1"), stored("held/2"))
	}
	if _, err := f.tr.read(f.ctx, []string{"other"}, true); err != nil || !stored("held/1") || !stored("held/2") {
		t.Fatalf("the next Read: %v; stored %v, %v: want both", err, stored("held/1"), stored("held/2"))
	}

	var h heldWrites
	h.hold([]backend.Item{{Addr: "a"}}, nil)
	taken, err := h.take()
	if err != nil || len(taken) != 1 {
		t.Fatalf("took %v, %v", taken, err)
	}
	h.hold([]backend.Item{{Addr: "b"}}, nil)
	h.giveBack(taken)
	if again, _ := h.take(); len(again) != 2 || again[0].Addr != "a" || again[1].Addr != "b" {
		t.Fatalf("after a failed Read gave back a: held %v, want a then b", again)
	}
}

// stored reports whether storage holds addr.
func (f *fixture) stored(addr string) bool {
	f.t.Helper()
	vals, err := f.mem.Read(f.ctx, []string{addr})
	if err != nil {
		f.t.Fatal(err)
	}
	return vals[0] != nil
}
