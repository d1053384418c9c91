package taostore_test

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
	"github.com/oblivkv/oblivkv/protocol/taostore"
)

// errReadAgain is the leak a cut path read leaves behind: the block's next
// access reads the path storage saw read when the crash came.
var errReadAgain = errors.New("the key's next access reads the path cut short again")

// TestCrashMidReadFinished: the process dies after a request's real path
// read reached storage and before its path was journaled as processed.
// Recovery reads that path again, identically, and moves the block to a
// fresh leaf, so the key's next access reads another path. Recovery that
// drops the cut read (leakRecoveryForgetsReads) leaves the block on that
// path, and its next access reads it again.
func TestCrashMidReadFinished(t *testing.T) {
	for name, lk := range map[string]taostore.Leak{"finished": taostore.NoLeak, "dropped (leak)": taostore.LeakRecoveryForgetsReads} {
		t.Run(name, func(t *testing.T) {
			err := crashMidRead(t, lk)
			t.Logf("view: %v", err)
			if lk == taostore.NoLeak && err != nil || lk != taostore.NoLeak && !errors.Is(err, errReadAgain) {
				t.Fatalf("view: %v", err)
			}
		})
	}
}

func crashMidRead(t *testing.T, lk taostore.Leak) error {
	keys, dir, log, m := kvtest.NewKeys(t), t.TempDir(), &observe.MemoryLog{}, mem.New()
	b := &durabletest.CutAfterRead{Backend: m}
	open := func(fresh bool) (kv.Store, *journal.Journal) {
		t.Helper()
		j, err := journal.Open(dir, keys, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m.Reopen() // the crashed store closed it
		s, err := taostore.OpenRaw(t.Context(), kv.Env{Backend: observe.NewTap(b, log), Keys: keys, Capacity: 256,
			ValueSize: 16, Fresh: fresh, Journal: j, Options: taostore.WithLeak(taostore.Seeded(taostore.Options{}, 7), lk)})
		if err != nil {
			j.Crash()
			t.Fatal(err)
		}
		return s, j
	}
	s, j := open(true)
	for i := range 20 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	b.Crash(j)
	if _, _, err := s.Get(t.Context(), "k3"); err == nil {
		t.Fatal("a Get whose path could not be journaled succeeded")
	}
	cut := treeReads(log.Records())
	s.Close()
	j.Crash()
	from := len(log.Records())
	s, j = open(false)
	defer j.Close()
	recovery := treeReads(log.Records()[from:])
	from = len(log.Records())
	if got, ok, err := s.Get(t.Context(), "k3"); err != nil || !ok || string(got) != "v" {
		t.Fatalf("Get after recovery = %q, %v, %v", got, ok, err)
	}
	next := treeReads(log.Records()[from:])
	var errs []error
	if len(recovery) != 1 || !slices.Equal(recovery[0].Addrs, cut[len(cut)-1].Addrs) {
		errs = append(errs, fmt.Errorf("recovery made %d Reads of the tree; want one, of the path cut short", len(recovery)))
	}
	switch {
	case len(next) != 1:
		errs = append(errs, fmt.Errorf("the key's next access made %d Reads", len(next)))
	case slices.Equal(next[0].Addrs, cut[len(cut)-1].Addrs):
		errs = append(errs, errReadAgain)
	}
	return errors.Join(errs...)
}

// treeReads returns the Reads of tree buckets among recs.
func treeReads(recs []observe.Record) []observe.Record {
	return slices.DeleteFunc(slices.Clone(recs), func(r observe.Record) bool {
		return r.Op != observe.OpRead || !strings.HasPrefix(r.Addrs[0], taostore.BucketPrefix)
	})
}

// TestFailedReadRetried: a path read storage served but reported failed is
// issued again, identically, and the request is answered; the key's next
// access reads another path.
func TestFailedReadRetried(t *testing.T) {
	b, log := &durabletest.CutAfterRead{Backend: mem.New()}, &observe.MemoryLog{}
	s, err := kv.Open(t.Context(), kv.Config{Protocol: "taostore", Backend: b, Keys: kvtest.NewKeys(t),
		Capacity: 256, ValueSize: 16, TapLog: log, Options: taostore.Seeded(taostore.Options{}, 9)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(t.Context(), "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	log.Reset()
	b.Fail()
	if got, ok, err := s.Get(t.Context(), "a"); err != nil || !ok || string(got) != "1" {
		t.Fatalf("Get whose first read failed = %q, %v, %v; want \"1\"", got, ok, err)
	}
	reads := treeReads(log.Records())
	if len(reads) != 2 || !reads[0].Err || reads[1].Err || !slices.Equal(reads[0].Addrs, reads[1].Addrs) {
		t.Fatalf("%d Reads for a Get whose first read failed; want the failed one and the same again", len(reads))
	}
	log.Reset()
	if _, _, err := s.Get(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if next := treeReads(log.Records()); len(next) != 1 || slices.Equal(next[0].Addrs, reads[0].Addrs) {
		t.Fatal("the key's next access reads the path of the failed read again")
	}
}
