package durable_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/seal"
)

// fixture is a log over memory storage and a journal in a directory.
type fixture struct {
	t    *testing.T
	b    *mem.Backend
	dir  string
	keys *seal.Keys
	j    *journal.Journal
	log  *durable.Log
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, b: mem.New(), dir: t.TempDir(), keys: kvtest.NewKeys(t)}
	f.reopen()
	return f
}

// reopen crashes the journal, if open, and opens it again.
func (f *fixture) reopen() {
	f.t.Helper()
	if f.j != nil {
		f.j.Crash()
	}
	j, err := journal.Open(f.dir, f.keys, journal.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(j.Crash)
	f.j, f.log = j, durable.New(j, f.b, f.keys)
}

// Creation writes the checkpoint at 0 and the anchor; records after it are
// recovered with their operations, which Redo writes again in order.
func TestRecoverAndRedo(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	if err := f.log.Create(ctx, []byte("empty")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		op := durable.Op{Items: []backend.Item{{Addr: "x", Value: fmt.Append(nil, i)}}}
		if _, err := f.log.Commit(fmt.Append(nil, "d", i), op); err != nil {
			t.Fatal(err)
		}
	} // the writes themselves never reach storage: the crash takes them
	f.reopen()
	r, err := f.log.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.State) != "empty" || fmt.Sprint(r.Deltas) != fmt.Sprint([][]byte{[]byte("d0"), []byte("d1"), []byte("d2")}) {
		t.Fatalf("recovered %q and %q", r.State, r.Deltas)
	}
	if err := f.log.Redo(ctx, r); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.b.Read(ctx, []string{"x"}); string(v[0]) != "2" {
		t.Fatalf("after Redo storage holds %q; want the last write, %q", v[0], "2")
	}
}

// Storage whose anchor is older than the checkpoint (an older copy put
// back), or newer than the journal, is refused with durable.ErrRollback; a
// store with no checkpoint is durable.ErrLost; a new store over a journal with a
// store's state is durable.ErrForeign.
func TestRefusals(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	if _, err := f.log.Recover(ctx); !errors.Is(err, durable.ErrLost) {
		t.Fatalf("Recover of an empty journal: %v; want durable.ErrLost", err)
	}
	f.reopen()
	if err := f.log.Create(ctx, []byte("s0")); err != nil {
		t.Fatal(err)
	}
	old, _ := f.b.Read(ctx, []string{durable.AnchorAddr})
	f.log.Commit([]byte("d"))
	if err := f.log.Checkpoint(ctx, []byte("s1"), f.log.Last()); err != nil {
		t.Fatal(err)
	}
	f.b.Write(ctx, []backend.Item{{Addr: durable.AnchorAddr, Value: old[0]}}) // the older copy
	f.reopen()
	if _, err := f.log.Recover(ctx); !errors.Is(err, durable.ErrRollback) {
		t.Fatalf("Recover with an older anchor: %v; want durable.ErrRollback", err)
	} else {
		t.Log(err)
	}
	f.reopen()
	if err := f.log.Create(ctx, []byte("again")); !errors.Is(err, durable.ErrForeign) {
		t.Fatalf("Create over a journal holding a store: %v; want durable.ErrForeign", err)
	}
	f.b.Delete(ctx, []string{durable.AnchorAddr})
	f.reopen()
	if _, err := f.log.Recover(ctx); !errors.Is(err, durable.ErrRollback) {
		t.Fatalf("Recover with no anchor: %v; want durable.ErrRollback", err)
	}
}
