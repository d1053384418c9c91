package treebeard_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// crashAtTreeWrite, once armed, crashes the journal at tree 0's first
// Write of the kind wanted (with slots: a bucket rewritten whole, or
// metadata only) after skip others: before the Write reaches storage
// (land false: the operation's record is journaled, its Write is not on
// storage) or right after (land true: the Write is on storage, the next
// record never comes). From then on it refuses every Write, as a dead
// process issues none (a tree retries its Reads pipelined with a refused
// Write until the store closes).
type crashAtTreeWrite struct {
	backend.Backend
	slots, land bool
	mu          sync.Mutex
	armed       *journal.Journal
	skip        int
	dead        bool
}

var errDead = errors.New("the process is dead")

// WriteFenced is where a tree's Writes come (every one is fenced).
func (b *crashAtTreeWrite) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead {
		return errDead
	}
	if b.armed == nil || !b.wanted(items) {
		return b.Backend.WriteFenced(ctx, f, items)
	}
	if b.skip--; b.skip >= 0 {
		return b.Backend.WriteFenced(ctx, f, items)
	}
	var err error
	if b.land {
		err = b.Backend.WriteFenced(ctx, f, items)
	}
	b.armed.Crash()
	b.armed, b.dead = nil, true
	return errors.Join(err, errDead)
}

// wanted reports whether items are a Write of tree 0 of the kind wanted.
func (b *crashAtTreeWrite) wanted(items []backend.Item) bool {
	layout := ringoram.Layout{Prefix: treebeard.TreePrefix(0)}
	metas, slots := 0, 0
	for _, it := range items {
		if _, ok := layout.ParseMeta(it.Addr); ok {
			metas++
		}
		if _, _, ok := layout.ParseSlot(it.Addr); ok {
			slots++
		}
	}
	return metas > 0 && (slots > 0) == b.slots
}

// TestCrashAroundTreeWrite: the process dies between a tree operation's
// record and its Write, and between its Write and the next record, for a
// multi-path read (its Write holds metadata only), an early reshuffle and
// an eviction (whole buckets rewritten: real blocks the operation read
// from storage are put back). The record holds no sealed item: recovery
// finds whether the Write landed and, if not, reads the operation's slots
// again under its plan and writes it. Every acknowledged write reads back.
func TestCrashAroundTreeWrite(t *testing.T) {
	for _, c := range []struct {
		name  string
		slots bool
		skip  int
		o     treebeard.Options
	}{
		// A = 100: no eviction in these runs; the root is read by every
		// read and reshuffled after S = 6 of them.
		{"multi-path read", false, 3, treebeard.Options{A: 100, CachedLevels: -1}},
		{"reshuffle", true, 0, treebeard.Options{A: 100, CachedLevels: -1}},
		{"eviction", true, 2, treebeard.Options{A: 1, K: 2}},
	} {
		for _, land := range []bool{false, true} {
			name := c.name + "/record, no Write"
			if land {
				name = c.name + "/Write, no next record"
			}
			t.Run(name, func(t *testing.T) {
				o := c.o
				o.Trees, o.ORAMShards, o.StashShards, o.Epoch = 1, 1, 1, -1
				m := mem.New()
				crashAroundTreeWrite(t, o, m, &crashAtTreeWrite{Backend: m, slots: c.slots, land: land, skip: c.skip})
			})
		}
	}
}

func crashAroundTreeWrite(t *testing.T, o treebeard.Options, m *mem.Backend, b *crashAtTreeWrite) {
	keys, dir := kvtest.NewKeys(t), t.TempDir()
	open := func(fresh bool) (kv.Store, *journal.Journal) {
		t.Helper()
		j, err := journal.Open(dir, keys, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m.Reopen()
		s, err := treebeard.OpenRaw(t.Context(), kv.Env{Backend: b, Keys: keys, Capacity: 256,
			ValueSize: 16, Fresh: fresh, Journal: j, Options: o})
		if err != nil {
			j.Crash()
			t.Fatal(err)
		}
		return s, j
	}
	s, j := open(true)
	acked := map[string]string{}
	for i := range 20 {
		acked[fmt.Sprint("k", i)] = "loaded"
	}
	items := map[string][]byte{}
	for k, v := range acked {
		items[k] = []byte(v)
	}
	if _, err := s.(kv.Loader).Load(t.Context(), maps.All(items)); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.armed = j
	b.mu.Unlock()
	cut := map[string]string{} // a Put the crash cut off: its outcome is unknown
	done := make(chan struct{})
	go func() { // until the crash fails a Put, or 200 writes do not crash
		defer close(done)
		for i := range 200 {
			k, v := fmt.Sprint("k", i%20), fmt.Sprint("v", i)
			if err := s.Put(t.Context(), k, []byte(v)); err != nil {
				cut[k] = v
				return
			}
			acked[k] = v
		}
	}()
	kvtest.WaitFor(t, "the crash", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.dead
	})
	s.Close() // the trees give up Reads they retry: the Put waiting on one fails
	j.Crash()
	<-done
	b.mu.Lock()
	b.dead = false
	b.mu.Unlock()
	s, j = open(false)
	defer j.Close()
	defer s.Close()
	for k, want := range acked {
		got, ok, err := s.Get(t.Context(), k)
		if err != nil || !ok || (string(got) != want && string(got) != cut[k]) {
			t.Fatalf("after the crash Get(%q) = %q, %v, %v; want %q", k, got, ok, err, want)
		}
	}
}
