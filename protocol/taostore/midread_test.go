package taostore_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/taostore"
)

// TestCrashMidReadFinished: the process dies after a request's real path
// read reached storage and before its path was journaled as processed.
// Recovery reads that path again, identically, and moves the block to a
// fresh leaf, so the key's next access reads another path. Recovery that
// drops the cut read (leakRecoveryForgetsReads) leaves the block on that
// path, and its next access reads it again.
func TestCrashMidReadFinished(t *testing.T) {
	for name, lk := range map[string]taostore.Leak{"finished": taostore.NoLeak, "dropped (leak)": taostore.LeakRecoveryForgetsReads} {
		t.Run(name, func(t *testing.T) {
			err := durabletest.CrashMidRead(t, taostore.BucketPrefix, func(env kv.Env) (kv.Store, error) {
				env.Options = taostore.Options{TestingKnobs: taostore.TestingKnobs{Seed: &[32]byte{7}, Leak: lk}}
				return taostore.OpenRaw(t.Context(), env)
			}).Check()
			t.Logf("view: %v", err)
			if lk == taostore.NoLeak && err != nil || lk != taostore.NoLeak && !errors.Is(err, durabletest.ErrReadAgain) {
				t.Fatalf("view: %v", err)
			}
		})
	}
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
		Capacity: 256, ValueSize: 16, TapLog: log, Options: taostore.Options{TestingKnobs: taostore.TestingKnobs{Seed: &[32]byte{9}}}})
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
