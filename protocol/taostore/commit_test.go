package taostore_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/taostore"
	"github.com/oblivkv/oblivkv/seal"
)

// TestReplyWaitsForItsRecord: a Put's reply leaves only once the journal
// has synced the record of its path. With the Syncs of every record after
// the Put's plan held, the Put's path is read and processed (the Handled
// hook says so, under the store's lock, after the Sequencer let out what
// it could), and no reply has left; once the Syncs go on, the Put returns.
func TestReplyWaitsForItsRecord(t *testing.T) {
	j, keys := tempJournal(t)
	g := durabletest.NewHeldSyncs(j)
	var released atomic.Int64
	handled := make(chan uint64, 8)
	o := taostore.Options{}
	o.TestingKnobs.Released = func(uint64) { released.Add(1) }
	o.TestingKnobs.Handled = func(a uint64) { handled <- a }
	s := openFresh(t, keys, g, o)
	defer s.Close()

	g.HoldAfter(j.Last() + 1) // the Put's plan record: its read must go ahead
	put := make(chan error, 1)
	go func() { put <- s.Put(t.Context(), "k", []byte("v")) }()
	<-handled
	if n := released.Load(); n != 0 {
		g.ReleaseAll()
		t.Fatalf("%d replies left before the record of their path was synced", n)
	}
	g.ReleaseAll()
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	if n := released.Load(); n != 1 {
		t.Fatalf("%d replies left, want 1", n)
	}
}

// TestRequestAfterCloseFails: once Close has stopped the committer, a
// request fails with kv.ErrClosed instead of waiting for a sync that
// never comes.
func TestRequestAfterCloseFails(t *testing.T) {
	j, keys := tempJournal(t)
	s := openFresh(t, keys, j, taostore.Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "k", []byte("v")); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Put after Close: %v; want kv.ErrClosed", err)
	}
}

// tempJournal opens a journal in a temporary directory under new keys,
// closed when the test ends.
func tempJournal(t *testing.T) (*journal.Journal, *seal.Keys) {
	keys := kvtest.NewKeys(t)
	j, err := journal.Open(t.TempDir(), keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, keys
}

// openFresh opens a fresh store in memory under keys, journaled in j.
func openFresh(t *testing.T, keys *seal.Keys, j durable.Journal, o taostore.Options) kv.Store {
	s, err := taostore.OpenRaw(t.Context(), kv.Env{Backend: mem.New(), Keys: keys, Capacity: 64, ValueSize: 16, Fresh: true, Journal: j, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
