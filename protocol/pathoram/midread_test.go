package pathoram

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// TestCrashMidReadFinished: the process dies after an access's path Read
// reached storage and before its write-back was journaled. Recovery reads
// that path again, identically, and writes it back with the block moved,
// so the next access to the key reads another path: storage learns that
// an access was cut short, not which key it was for. Recovery that drops
// the cut access (leakRecoveryForgetsReads) leaves the block on that path,
// and the key's next access reads it again, which this test rejects.
func TestCrashMidReadFinished(t *testing.T) {
	for name, lk := range map[string]leak{"finished": noLeak, "dropped (leak)": leakRecoveryForgetsReads} {
		t.Run(name, func(t *testing.T) {
			err := durabletest.CrashMidRead(t, treePrefix, func(env kv.Env) (kv.Store, error) {
				env.Options = Options{TestingKnobs: TestingKnobs{Seed: &[32]byte{7}, Leak: lk}}
				return open(t.Context(), env)
			}).Check()
			t.Logf("view: %v", err)
			if lk == noLeak && err != nil || lk != noLeak && !errors.Is(err, durabletest.ErrReadAgain) {
				t.Fatalf("view: %v", err)
			}
		})
	}
}

// TestFailedReadFinished: an access whose path Read failed (storage may
// have served it) is finished by the next access, whatever its key: the
// same path is read again first and written back.
func TestFailedReadFinished(t *testing.T) {
	b, log := &durabletest.CutAfterRead{Backend: mem.New()}, &observe.MemoryLog{}
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "pathoram", Backend: b, Keys: kvtest.NewKeys(t),
		Capacity: 256, ValueSize: 16, TapLog: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(t.Context(), "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	b.Fail()
	if _, _, err := s.Get(t.Context(), "a"); err == nil {
		t.Fatal("a Get whose Read failed succeeded")
	}
	failed := log.Records()[len(log.Records())-1]
	log.Reset()
	if err := s.Put(t.Context(), "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	recs := log.Records()
	if len(recs) != 4 || recs[0].Op != observe.OpRead || !slices.Equal(recs[0].Addrs, failed.Addrs) ||
		recs[1].Op != observe.OpWrite || !slices.Equal(recs[1].Addrs, failed.Addrs) {
		t.Fatalf("calls after a failed Read: %d; want the failed path read and written back, then the Put's read and write", len(recs))
	}
	if got, ok, err := s.Get(t.Context(), "a"); err != nil || !ok || string(got) != "1" {
		t.Fatalf("Get(a) = %q, %v, %v", got, ok, err)
	}
}

// TestEarlierPlanRecord: a planned read an earlier build journaled has no
// next leaf; replayed, it gets a fresh one, and a malformed one fails.
func TestEarlierPlanRecord(t *testing.T) {
	s := openBare(t)
	id := tree.IDOf(s.keys, "k")
	earlier := binary.AppendUvarint(append([]byte{deltaRead}, id[:]...), 5)
	if err := s.Apply(earlier); err != nil {
		t.Fatal(err)
	}
	if u := s.o.unfinished; len(u) != 1 || u[0].id != id || u[0].leaf != 5 || u[0].next >= s.o.g.Leaves() {
		t.Fatalf("unfinished after an earlier build's plan: %+v", u)
	}
	if err := s.Apply(binary.AppendUvarint(earlier, s.o.g.Leaves())); err == nil {
		t.Fatal("a plan whose next leaf is beyond the tree applied")
	}
}

// TestReplayEndsOnlyTheAccessRecorded: two reads of one block planned on
// one leaf (the first access's next leaf drawn equal to the leaf it read,
// as happens by chance), then the first access's record: replay leaves
// the second read unfinished, for recovery to finish.
func TestReplayEndsOnlyTheAccessRecorded(t *testing.T) {
	s := openBare(t)
	p := plannedRead{id: tree.IDOf(s.keys, "k"), leaf: 5, next: 5}
	for _, rec := range [][]byte{journalRead(p), journalRead(p), s.o.journalDelta(p.leaf, p.id, false)} {
		if err := s.Apply(rec); err != nil {
			t.Fatal(err)
		}
	}
	if u := s.o.unfinished; len(u) != 1 || u[0].id != p.id || u[0].leaf != p.leaf {
		t.Fatalf("unfinished after two plans and the first access's record: %+v; want the second plan", u)
	}
}

// openBare opens a fresh store of 64 keys of 16 bytes on memory storage,
// without a journal, closed when the test ends.
func openBare(t *testing.T) *store {
	t.Helper()
	st, err := open(t.Context(), kv.Env{Backend: mem.New(), Keys: kvtest.NewKeys(t), Capacity: 64, ValueSize: 16, Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.(*store)
}
