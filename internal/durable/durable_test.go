package durable_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// machine is a durable.Machine whose state is the snapshot it was
// restored from and the records applied since; it fails to apply the
// record failOn.
type machine struct {
	state  []string
	failOn string
}

func (m *machine) Restore(snapshot []byte) error {
	m.state = []string{string(snapshot)}
	return nil
}

func (m *machine) Apply(record []byte) error {
	if string(record) == m.failOn {
		return errBadRecord
	}
	m.state = append(m.state, string(record))
	return nil
}

func (m *machine) Snapshot() ([]byte, error) { return []byte(strings.Join(m.state, ",")), nil }

var errBadRecord = errors.New("a record the machine refuses")

// crashed returns a fixture whose store was created with state "empty",
// then committed n records (commitWrites) before a crash.
func crashed(t *testing.T, n int) *fixture {
	f := newFixture(t)
	if err := f.log.Create(t.Context(), []byte("empty")); err != nil {
		t.Fatal(err)
	}
	commitWrites(f, n)
	f.reopen()
	return f
}

// commitWrites commits records d0, d1, ... each planning a write of its
// number at "x"; the writes never reach storage, as a crash takes them.
func commitWrites(f *fixture, n int) {
	f.t.Helper()
	for i := range n {
		op := durable.Op{Items: []backend.Item{{Addr: "x", Value: fmt.Append(nil, i)}}}
		if _, err := f.log.Commit(fmt.Append(nil, "d", i), op); err != nil {
			f.t.Fatal(err)
		}
	}
}

// Creation writes the checkpoint at 0 and the anchor; Replay restores the
// machine from it, applies the records after it in order and writes
// again what they planned, in order.
func TestReplay(t *testing.T) {
	f, ctx := crashed(t, 3), t.Context()
	m := &machine{}
	n, err := f.log.Replay(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"empty", "d0", "d1", "d2"}; n != 3 || !slices.Equal(m.state, want) {
		t.Fatalf("Replay applied %d records, leaving %q; want 3, leaving %q", n, m.state, want)
	}
	if v, _ := f.b.Read(ctx, []string{"x"}); string(v[0]) != "2" {
		t.Fatalf("after Replay storage holds %q; want the last write, %q", v[0], "2")
	}
}

// A record the machine cannot apply stops Replay with an error naming
// the record's place after the checkpoint, and nothing is written again.
func TestReplayNamesTheRecord(t *testing.T) {
	f, ctx := crashed(t, 3), t.Context()
	n, err := f.log.Replay(ctx, &machine{failOn: "d1"})
	if !errors.Is(err, errBadRecord) || !strings.Contains(err.Error(), "journal record 2 after the checkpoint") || n != 1 {
		t.Fatalf("Replay = %d, %v; want 1 and %v naming journal record 2", n, err, errBadRecord)
	}
	if v, _ := f.b.Read(ctx, []string{"x"}); v[0] != nil {
		t.Fatalf("a failed Replay wrote %q to storage", v[0])
	}
}

// CheckpointOf replaces the journal by the machine's snapshot: the next
// Replay restores it and applies only the records after it.
func TestCheckpointOf(t *testing.T) {
	f, ctx := crashed(t, 2), t.Context()
	m := &machine{}
	if _, err := f.log.Replay(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := f.log.CheckpointOf(ctx, m); err != nil {
		t.Fatal(err)
	}
	commitWrites(f, 1)
	f.reopen()
	again := &machine{}
	if n, err := f.log.Replay(ctx, again); err != nil || n != 1 || !slices.Equal(again.state, []string{"empty,d0,d1", "d0"}) {
		t.Fatalf("Replay after CheckpointOf = %d, %v, leaving %q; want 1 record on the snapshot", n, err, again.state)
	}
}

// Storage whose anchor is older than the checkpoint (an older copy put
// back), or newer than the journal, is refused by Replay with durable.ErrRollback; a
// store with no checkpoint is durable.ErrLost; a new store over a journal with a
// store's state is durable.ErrForeign.
func TestRefusals(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	if _, err := f.log.Replay(ctx, &machine{}); !errors.Is(err, durable.ErrLost) {
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
	if _, err := f.log.Replay(ctx, &machine{}); !errors.Is(err, durable.ErrRollback) {
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
	if _, err := f.log.Replay(ctx, &machine{}); !errors.Is(err, durable.ErrRollback) {
		t.Fatalf("Recover with no anchor: %v; want durable.ErrRollback", err)
	}
}

// incarnationJournal is a journal that reports the incarnation inc.
type incarnationJournal struct {
	durable.Journal
	inc uint64
}

func (j incarnationJournal) Incarnation() uint64 { return j.inc }

// A deposed process's checkpoint does not move the anchor: a later open
// of the store (a higher incarnation) checkpoints, and storage refuses
// the earlier one's anchor write, though it names a later position.
func TestAnchorFenced(t *testing.T) {
	ctx, b, keys := t.Context(), mem.New(), kvtest.NewKeys(t)
	open := func(inc uint64) *durable.Log {
		j, err := journal.Open(t.TempDir(), keys, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(j.Crash)
		return durable.New(incarnationJournal{j, inc}, b, keys)
	}
	older, newer := open(1), open(2)
	for _, l := range []*durable.Log{older, newer} {
		if err := l.Create(ctx, []byte("s0")); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := b.Read(ctx, []string{durable.AnchorAddr})
	for range 3 {
		older.Commit([]byte("d"))
	}
	err := older.Checkpoint(ctx, []byte("s1"), older.Last())
	if !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("the older open's checkpoint after the newer one's: %v; want backend.ErrFenced", err)
	}
	if got, _ := b.Read(ctx, []string{durable.AnchorAddr}); !slices.Equal(got[0], want[0]) {
		t.Fatal("the older open's refused checkpoint moved the anchor")
	}
	if err := newer.Checkpoint(ctx, []byte("new2"), newer.Last()); err != nil {
		t.Fatalf("the newer open's next checkpoint: %v", err)
	}
}
