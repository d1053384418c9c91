package pathoram

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/durabletest"
	"github.com/oblivkv/oblivkv/internal/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
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
			err := crashMidRead(t, lk)
			t.Logf("view: %v", err)
			if lk == noLeak && err != nil || lk != noLeak && !errors.Is(err, errReadAgain) {
				t.Fatalf("view: %v", err)
			}
		})
	}
}

func crashMidRead(t *testing.T, lk leak) error {
	keys, dir, log, m := kvtest.NewKeys(t), t.TempDir(), &observe.MemoryLog{}, mem.New()
	b := &durabletest.CutAfterRead{Backend: m}
	open := func(fresh bool) (*store, *journal.Journal) {
		t.Helper()
		j, err := journal.Open(dir, keys, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m.Reopen() // the crashed store closed it
		st, err := open(t.Context(), kv.Env{Backend: observe.NewTap(b, log), Keys: keys, Capacity: 256, ValueSize: 16,
			Fresh: fresh, Journal: j, Options: Options{seed: seeded(7).seed, leak: lk}})
		if err != nil {
			j.Crash()
			t.Fatal(err)
		}
		return st.(*store), j
	}
	s, j := open(true)
	for i := range 20 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	b.Crash(j)
	if _, _, err := s.Get(t.Context(), "k3"); err == nil {
		t.Fatal("a Get whose write-back could not be journaled succeeded")
	}
	cut := log.Records()[len(log.Records())-1]
	if cut.Op != observe.OpRead {
		t.Fatalf("the last call before the crash is a %v", cut.Op)
	}
	s.Close()
	j.Crash()
	from := len(log.Records())
	s, j = open(false)
	defer j.Close()
	recovery := slices.Clone(log.Records()[from:])
	from = len(log.Records())
	if got, ok, err := s.Get(t.Context(), "k3"); err != nil || !ok || string(got) != "v" {
		t.Fatalf("Get after recovery = %q, %v, %v", got, ok, err)
	}
	return checkCutRead(cut, recovery, log.Records()[from:])
}

// errReadAgain is the leak itself: the key's next access reads the path
// storage saw read when the crash came.
var errReadAgain = errors.New("the key's next access reads the path cut short again")

// checkCutRead checks storage's view around a cut access: recovery reads
// exactly the cut path once and writes it back, and the key's next access
// reads another path.
func checkCutRead(cut observe.Record, recovery, next []observe.Record) error {
	var reads []observe.Record
	for _, r := range recovery {
		if r.Op == observe.OpRead && strings.HasPrefix(r.Addrs[0], treePrefix) { // not the anchor's
			reads = append(reads, r)
		}
	}
	var errs []error
	if len(reads) != 1 || !slices.Equal(reads[0].Addrs, cut.Addrs) {
		errs = append(errs, fmt.Errorf("recovery made %d Reads of the tree; want one, of the path cut short", len(reads)))
	} else if i := slices.IndexFunc(recovery, func(r observe.Record) bool { return r.Seq == reads[0].Seq }); i+1 >= len(recovery) ||
		recovery[i+1].Op != observe.OpWrite || !slices.Equal(recovery[i+1].Addrs, cut.Addrs) {
		errs = append(errs, errors.New("recovery's Read of the cut path is not followed by its write-back"))
	}
	switch {
	case len(next) == 0 || next[0].Op != observe.OpRead:
		errs = append(errs, errors.New("the next access made no Read"))
	case slices.Equal(next[0].Addrs, cut.Addrs):
		errs = append(errs, errReadAgain)
	}
	return errors.Join(errs...)
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
