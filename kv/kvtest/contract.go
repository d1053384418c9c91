package kvtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
)

// RunContract runs the kv.Store contract suite on stores of cfg over fresh
// storage of st, one subtest per property. Each subtest opens its own
// stores, so a failure names exactly the property that broke.
func RunContract(t *testing.T, cfg Config, st Storage) {
	t.Helper()
	cfg = cfg.withDefaults()
	cfg.validate(t)
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"GetMissing", testGetMissing},
		{"PutGet", testPutGet},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"DeleteMissing", testDeleteMissing},
		{"EmptyValue", testEmptyValue},
		{"BinaryKeysValues", testBinary},
		{"NoAliasing", testNoAliasing},
		{"ValueSize", testValueSize},
		{"KeySize", testKeySize},
		{"Capacity", testCapacity},
		{"CapacityConcurrent", testCapacityConcurrent},
		{"Closed", testClosed},
		{"Restart", testRestart},
		{"StoredKeys", testStoredKeys},
		{"WrongKey", testWrongKey},
		{"Mismatch", testMismatch},
		{"Load", testLoad},
		{"LoadNonEmpty", testLoadNonEmpty},
		{"LoadTooLarge", testLoadTooLarge},
		{"LoadOverCapacity", testLoadOverCapacity},
		{"TamperFlip", testTamperFlip},
		{"TamperSwap", testTamperSwap},
		{"TamperReplay", testTamperReplay},
		{"TamperMove", testTamperMove},
		{"Concurrent", testConcurrent},
		{"Mutations", testMutations},
		{"MutationErrors", testMutationErrors},
		{"MutationsFull", testMutationsFull},
		{"MutationsConcurrent", testMutationsConcurrent},
		{"SetIfNoneExist", testSetIfNoneExist},
		{"DurableRollback", testRollback},
	}
	for _, tc := range tests {
		if !cfg.applies(tc.name) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t, cfg, st)) })
	}
}

// applies reports whether a contract subtest concerns the protocol: the
// load tests need a bulk loader, the tamper tests integrity (and the
// replay test a version bound into each seal). Subtests that
// do not apply are not run at all, rather than skipped.
func (c Config) applies(name string) bool {
	switch {
	case strings.HasPrefix(name, "Load"):
		return !c.NoLoader
	case name == "TamperReplay":
		return c.Integrity && !c.NoFreshness
	case strings.HasPrefix(name, "Tamper"):
		return c.Integrity
	case strings.HasPrefix(name, "Durable"):
		return c.Durable
	}
	return true
}

// checkers is how many goroutines model.check reads with.
const checkers = 8

// valueOf returns n pseudo-random bytes determined by tag.
func valueOf(tag string, n int) []byte {
	r := rand.NewChaCha8(sha256.Sum256([]byte(tag)))
	b := make([]byte, n)
	r.Read(b)
	return b
}

// show prints a value compactly for failure messages.
func show(v []byte) string {
	if len(v) <= 24 {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%q... (%d bytes)", v[:24], len(v))
}

func mustPut(t testing.TB, s kv.Store, key string, val []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, val); err != nil {
		t.Fatalf("Put(%q, %s): %v", key, show(val), err)
	}
}

func mustDelete(t testing.TB, s kv.Store, key string) {
	t.Helper()
	if err := s.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
}

func wantValue(t *testing.T, s kv.Store, key string, want []byte) {
	t.Helper()
	got, ok, err := s.Get(t.Context(), key)
	switch {
	case err != nil:
		t.Errorf("Get(%q): %v; want %s", key, err, show(want))
	case !ok:
		t.Errorf("Get(%q): missing; want %s", key, show(want))
	case !bytes.Equal(got, want):
		t.Errorf("Get(%q) = %s; want %s", key, show(got), show(want))
	}
}

func wantMissing(t *testing.T, s kv.Store, key string) {
	t.Helper()
	got, ok, err := s.Get(t.Context(), key)
	switch {
	case err != nil:
		t.Errorf("Get(%q): %v; want missing", key, err)
	case ok || got != nil:
		t.Errorf("Get(%q) = %s, %v; want missing (nil, false)", key, show(got), ok)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v; want %v", what, err, target)
	}
}

func wantKeys(t *testing.T, s kv.Store, n int) {
	t.Helper()
	if got := s.Stats().Keys; got != int64(n) {
		t.Errorf("Stats().Keys = %d; want %d", got, n)
	}
}

func closeStore(t *testing.T, s kv.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func testGetMissing(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	wantMissing(t, s, "never-written")
	mustPut(t, s, "other", []byte("x"))
	wantMissing(t, s, "never-written")
	wantMissing(t, s, "othe")   // a prefix of a stored key
	wantMissing(t, s, "other2") // a stored key is a prefix of it
	wantKeys(t, s, 1)
}

func testPutGet(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	vs := h.cfg.ValueSize
	lens := []int{1, 2, 7, 16, vs / 2, vs - 1, vs}
	for i, n := range lens {
		mustPut(t, s, fmt.Sprintf("key-%d", i), valueOf(fmt.Sprint("putget", i), n))
	}
	for i, n := range lens {
		wantValue(t, s, fmt.Sprintf("key-%d", i), valueOf(fmt.Sprint("putget", i), n))
	}
	wantKeys(t, s, len(lens))
}

func testOverwrite(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	vs := h.cfg.ValueSize
	mustPut(t, s, "neighbour", []byte("stays"))
	// Longer, then shorter (a padding bug would leak the old tail), then
	// the largest value, then a 1-byte one.
	for i, n := range []int{vs / 2, 3, vs, 1} {
		v := valueOf(fmt.Sprint("overwrite", i), n)
		mustPut(t, s, "k", v)
		wantValue(t, s, "k", v)
	}
	wantValue(t, s, "neighbour", []byte("stays"))
	wantKeys(t, s, 2)
}

func testDelete(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	mustPut(t, s, "a", []byte("va"))
	mustPut(t, s, "b", []byte("vb"))
	mustDelete(t, s, "a")
	wantMissing(t, s, "a")
	wantValue(t, s, "b", []byte("vb"))
	wantKeys(t, s, 1)
	mustDelete(t, s, "a") // deleting again is not an error
	wantMissing(t, s, "a")
	mustPut(t, s, "a", []byte("va2"))
	wantValue(t, s, "a", []byte("va2"))
	wantKeys(t, s, 2)
}

func testDeleteMissing(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	mustDelete(t, s, "never-written")
	wantMissing(t, s, "never-written")
	wantKeys(t, s, 0)
	mustPut(t, s, "x", []byte("1"))
	mustDelete(t, s, "never-written-2")
	wantValue(t, s, "x", []byte("1"))
	wantKeys(t, s, 1)
}

func testEmptyValue(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	for _, tc := range []struct {
		key string
		val []byte
	}{{"empty", []byte{}}, {"nil", nil}} {
		mustPut(t, s, tc.key, tc.val)
		got, ok, err := s.Get(t.Context(), tc.key)
		if err != nil || !ok || len(got) != 0 {
			t.Errorf("Get(%q) after Put of an empty value = %s, %v, %v; want an empty value, true, nil",
				tc.key, show(got), ok, err)
		}
	}
	wantMissing(t, s, "missing")
	// Empty after non-empty: the store must keep the length, not pad.
	mustPut(t, s, "empty", []byte("not empty"))
	wantValue(t, s, "empty", []byte("not empty"))
	mustPut(t, s, "empty", []byte{})
	if got, ok, err := s.Get(t.Context(), "empty"); err != nil || !ok || len(got) != 0 {
		t.Errorf("Get(empty) after overwriting with an empty value = %s, %v, %v; want empty, true, nil", show(got), ok, err)
	}
	wantKeys(t, s, 2)
}

func testBinary(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	mk, vs := h.cfg.MaxKeySize, h.cfg.ValueSize
	keys := []string{"", "\x00", "\x00\x00", "a", "a\x00", "\x00a", "\xff", "\xff\xff\xfe",
		"k\r\n", "sp ace", "ünïcødé", strings.Repeat("\x00", mk), strings.Repeat("\xff", mk)}
	r := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		k := make([]byte, 1+r.IntN(mk))
		for i := range k {
			k[i] = byte(r.UintN(256))
		}
		keys = append(keys, string(k))
	}
	seen := map[string]bool{}
	var uniq []string
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, k)
		}
	}
	allBytes := make([]byte, vs)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	val := func(i int) []byte {
		switch i {
		case 0:
			return allBytes
		case 1:
			return make([]byte, vs) // all zeros
		case 2:
			return []byte{0}
		}
		return valueOf(fmt.Sprint("binary", i), 1+i*7%vs)
	}
	for i, k := range uniq {
		mustPut(t, s, k, val(i))
	}
	for i, k := range uniq {
		wantValue(t, s, k, val(i))
	}
	wantKeys(t, s, len(uniq))
	mustDelete(t, s, "")
	wantMissing(t, s, "")
	wantValue(t, s, "\x00", val(1))
	mustDelete(t, s, "a")
	wantValue(t, s, "a\x00", val(4))
}

func testNoAliasing(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	buf := []byte("original value")
	mustPut(t, s, "a", buf)
	copy(buf, "XXXXXXXX") // the caller reuses its buffer
	wantValue(t, s, "a", []byte("original value"))
	got, _, err := s.Get(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i] = 'Y' // the caller scribbles on what Get returned
	}
	wantValue(t, s, "a", []byte("original value"))
}

func testValueSize(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	vs := h.cfg.ValueSize
	exact := valueOf("exact", vs)
	mustPut(t, s, "v", exact)
	wantValue(t, s, "v", exact)
	for _, n := range []int{vs + 1, 2*vs + 3} {
		err := s.Put(t.Context(), "v", valueOf("big", n))
		wantErr(t, fmt.Sprintf("Put of an existing key with a %d-byte value (value size %d)", n, vs), err, kv.ErrValueTooLarge)
		wantValue(t, s, "v", exact) // untouched
		err = s.Put(t.Context(), "new", valueOf("big", n))
		wantErr(t, fmt.Sprintf("Put of a new key with a %d-byte value (value size %d)", n, vs), err, kv.ErrValueTooLarge)
		wantMissing(t, s, "new")
	}
	wantKeys(t, s, 1)
}

func testKeySize(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	k := strings.Repeat("k", h.cfg.MaxKeySize)
	mustPut(t, s, k, []byte("fits"))
	wantValue(t, s, k, []byte("fits"))
	long := k + "x"
	ctx := t.Context()
	wantErr(t, "Put of a key one byte too long", s.Put(ctx, long, []byte("no")), kv.ErrKeyTooLarge)
	_, _, err := s.Get(ctx, long)
	wantErr(t, "Get of a key one byte too long", err, kv.ErrKeyTooLarge)
	wantErr(t, "Delete of a key one byte too long", s.Delete(ctx, long), kv.ErrKeyTooLarge)
	wantValue(t, s, k, []byte("fits"))
	wantKeys(t, s, 1)
}

func capKey(i int) string { return fmt.Sprintf("cap-%d", i) }
func capVal(i int) []byte { return valueOf(fmt.Sprint("cap", i), 8+i%16) }

func testCapacity(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	n := h.cfg.Capacity
	for i := range n {
		mustPut(t, s, capKey(i), capVal(i))
	}
	wantKeys(t, s, n)
	wantErr(t, fmt.Sprintf("Put of key %d into a store of capacity %d", n+1, n),
		s.Put(t.Context(), "one-too-many", []byte("x")), kv.ErrFull)
	wantMissing(t, s, "one-too-many")
	// Overwriting an existing key of a full store works.
	mustPut(t, s, capKey(0), []byte("overwritten"))
	wantValue(t, s, capKey(0), []byte("overwritten"))
	// After a delete, one new key fits, and then no more.
	mustDelete(t, s, capKey(1))
	mustPut(t, s, "one-too-many", []byte("now fits"))
	wantValue(t, s, "one-too-many", []byte("now fits"))
	wantErr(t, "Put of a new key into a store full again", s.Put(t.Context(), "another", []byte("x")), kv.ErrFull)
	wantMissing(t, s, "another")
	wantMissing(t, s, capKey(1))
	for i := 2; i < n; i++ {
		wantValue(t, s, capKey(i), capVal(i))
	}
	wantKeys(t, s, n)
}

// testCapacityConcurrent races new keys for the last free slots: exactly
// as many Puts as there are free slots succeed, the rest get ErrFull.
func testCapacityConcurrent(t *testing.T, h *harness) {
	const free, racers, rounds = 4, 16, 10
	s := h.mustOpen(nil)
	n := h.cfg.Capacity
	for i := range n - free {
		mustPut(t, s, capKey(i), capVal(i))
	}
	for r := range rounds {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []string
		for g := range racers {
			k := fmt.Sprintf("race-%d-%d", r, g)
			wg.Go(func() {
				err := s.Put(t.Context(), k, []byte(k))
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, k)
					mu.Unlock()
				case !errors.Is(err, kv.ErrFull):
					t.Errorf("Put(%q) racing for the last slots: %v; want nil or ErrFull", k, err)
				}
			})
		}
		wg.Wait()
		if len(won) != free {
			t.Fatalf("round %d: %d of %d racing Puts of new keys succeeded with %d free slots; want exactly %d",
				r, len(won), racers, free, free)
		}
		wantKeys(t, s, n)
		for _, k := range won {
			wantValue(t, s, k, []byte(k))
			mustDelete(t, s, k)
		}
	}
}

func testClosed(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	mustPut(t, s, "k", []byte("v"))
	closeStore(t, s)
	ctx := t.Context()
	_, _, err := s.Get(ctx, "k")
	wantErr(t, "Get after Close", err, kv.ErrClosed)
	wantErr(t, "Put after Close", s.Put(ctx, "k", []byte("v2")), kv.ErrClosed)
	wantErr(t, "Delete after Close", s.Delete(ctx, "k"), kv.ErrClosed)
	wantErr(t, "second Close", s.Close(), kv.ErrClosed)
	if l, ok := kv.AsLoader(s); ok {
		_, err := l.Load(ctx, itemsOf(map[string][]byte{"x": []byte("y")}))
		wantErr(t, "Load after Close", err, kv.ErrClosed)
	}
	_ = s.Stats() // must not panic
	// The data written before Close is still there.
	s2 := h.mustOpen(nil)
	wantValue(t, s2, "k", []byte("v"))
}

// testStoredKeys: a protocol that names its keys names exactly those it
// holds, overwritten and empty ones included, deleted ones not, also once
// reopened; one that does not reports no lister.
func testStoredKeys(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	if _, ok := kv.AsKeyLister(s); !h.cfg.NamesKeys {
		if ok {
			t.Fatal("kv.AsKeyLister reports a lister, and Config.NamesKeys is false")
		}
		return
	}
	want := []string{"empty", "\xff\x00binary"}
	mustPut(t, s, "empty", nil)
	mustPut(t, s, want[1], []byte("v"))
	for i := range 10 {
		mustPut(t, s, capKey(i), capVal(i))
		if i%3 == 0 {
			mustDelete(t, s, capKey(i))
		} else {
			want = append(want, capKey(i))
		}
	}
	mustPut(t, s, capKey(1), []byte("overwritten"))
	checkStoredKeys(t, s, want)
	closeStore(t, s)
	checkStoredKeys(t, h.mustOpen(nil), want)
}

// checkStoredKeys checks that s names exactly want.
func checkStoredKeys(t *testing.T, s kv.Store, want []string) {
	t.Helper()
	l, ok := kv.AsKeyLister(s)
	if !ok {
		t.Fatal("kv.AsKeyLister reports no lister, and Config.NamesKeys is true")
	}
	got, err := l.StoredKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want = slices.Sorted(slices.Values(want)); !slices.Equal(got, want) {
		t.Fatalf("StoredKeys = %q, want %q", got, want)
	}
}

// model is the expected content of a store.
type model map[string][]byte

func (m model) check(t *testing.T, s kv.Store, alsoMissing ...string) {
	t.Helper()
	// The Gets run from several goroutines: a protocol that batches
	// requests (treebeard's epochs, waffle's and cloak's batches) would
	// answer Gets made one after the other a batch each.
	keys := slices.Collect(maps.Keys(m))
	var wg sync.WaitGroup
	for w := range checkers {
		wg.Go(func() {
			for i := w; i < len(keys); i += checkers {
				wantValue(t, s, keys[i], m[keys[i]])
			}
		})
	}
	wg.Wait()
	for _, k := range alsoMissing {
		wantMissing(t, s, k)
	}
	wantKeys(t, s, len(m))
}

func testRestart(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	want := model{}
	var deleted []string
	n := h.cfg.Capacity / 2
	for i := range n {
		k, v := capKey(i), capVal(i)
		mustPut(t, s, k, v)
		want[k] = v
	}
	for i := 0; i < n; i += 3 {
		k, v := capKey(i), valueOf(fmt.Sprint("restart2", i), 1+i)
		mustPut(t, s, k, v)
		want[k] = v
	}
	for i := 1; i < n; i += 5 {
		mustDelete(t, s, capKey(i))
		delete(want, capKey(i))
		deleted = append(deleted, capKey(i))
	}
	mustPut(t, s, "empty", nil)
	want["empty"] = []byte{}
	closeStore(t, s)

	s = h.mustOpen(nil)
	want.check(t, s, deleted...)
	// The reopened store knows how full it is.
	for i := n; len(want) < h.cfg.Capacity; i++ {
		k, v := capKey(i), capVal(i)
		mustPut(t, s, k, v)
		want[k] = v
	}
	wantErr(t, "Put of a new key into a reopened full store", s.Put(t.Context(), "one-too-many", []byte("x")), kv.ErrFull)
	mustDelete(t, s, capKey(0))
	delete(want, capKey(0))
	closeStore(t, s)

	s = h.mustOpen(nil)
	want.check(t, s, append(deleted, capKey(0), "one-too-many")...)
}

// testRollback stores values, copies the whole storage, overwrites half
// of them, and puts the copy back: reopening must be refused with
// kv.ErrRollback (the storage operator restored an older consistent copy,
// which no single block check can see), and putting the newer storage
// back must open again.
func testRollback(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	n := h.cfg.Capacity / 2
	for i := range n {
		mustPut(t, s, capKey(i), capVal(i))
	}
	closeStore(t, s)
	old := h.copyStorage()
	s = h.mustOpen(nil)
	want := model{}
	for i := range n {
		want[capKey(i)] = capVal(i)
		if i%2 == 0 {
			want[capKey(i)] = valueOf(fmt.Sprint("new", i), 1+i)
			mustPut(t, s, capKey(i), want[capKey(i)])
		}
	}
	closeStore(t, s)
	newer := h.copyStorage()
	h.restoreStorage(old)
	_, err := h.tryOpen(nil)
	wantErr(t, "reopening storage restored from an older copy", err, kv.ErrRollback)
	h.restoreStorage(newer)
	s = h.mustOpen(nil)
	want.check(t, s)
}

// copyStorage returns everything the storage holds.
func (h *harness) copyStorage() map[string][]byte {
	out := map[string][]byte{}
	h.raw(func(b backend.Backend) {
		var addrs []string
		if err := b.Scan(h.t.Context(), "", func(a string) error { addrs = append(addrs, a); return nil }); err != nil {
			h.t.Fatal(err)
		}
		vals, err := b.Read(h.t.Context(), addrs)
		if err != nil {
			h.t.Fatal(err)
		}
		for i, a := range addrs {
			out[a] = vals[i]
		}
	})
	return out
}

// restoreStorage makes the storage hold exactly what copyStorage returned.
func (h *harness) restoreStorage(saved map[string][]byte) {
	h.raw(func(b backend.Backend) {
		var extra []string
		if err := b.Scan(h.t.Context(), "", func(a string) error {
			if _, ok := saved[a]; !ok {
				extra = append(extra, a)
			}
			return nil
		}); err != nil {
			h.t.Fatal(err)
		}
		items := make([]backend.Item, 0, len(saved))
		for a, v := range saved {
			items = append(items, backend.Item{Addr: a, Value: v})
		}
		if err := errors.Join(b.Delete(h.t.Context(), extra), b.Write(h.t.Context(), items)); err != nil {
			h.t.Fatal(err)
		}
	})
}

func testWrongKey(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	mustPut(t, s, "k", []byte("v"))
	closeStore(t, s)
	other := NewKeys(t)
	_, err := h.tryOpen(func(c *kv.Config) { c.Keys = other })
	wantErr(t, "reopening with another key", err, kv.ErrWrongKey)
	// The refused open changed nothing.
	s = h.mustOpen(nil)
	wantValue(t, s, "k", []byte("v"))
	wantKeys(t, s, 1)
}

func testMismatch(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	mustPut(t, s, "k", []byte("v"))
	closeStore(t, s)
	for _, tc := range []struct {
		name string
		mod  func(*kv.Config)
	}{
		{"another protocol", func(c *kv.Config) { c.Protocol = stubName() }},
		{"another capacity", func(c *kv.Config) { c.Capacity++ }},
		{"another value size", func(c *kv.Config) { c.ValueSize++ }},
		{"another max key size", func(c *kv.Config) { c.MaxKeySize++ }},
	} {
		_, err := h.tryOpen(tc.mod)
		wantErr(t, "reopening with "+tc.name, err, kv.ErrMismatch)
	}
	s = h.mustOpen(nil)
	wantValue(t, s, "k", []byte("v"))
	wantKeys(t, s, 1)
}

func itemsOf(m map[string][]byte) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for k, v := range m {
			if !yield(k, v) {
				return
			}
		}
	}
}

func loader(t *testing.T, h *harness, s kv.Store) kv.Loader {
	t.Helper()
	l, ok := kv.AsLoader(s)
	if !ok {
		t.Fatalf("kv.AsLoader: protocol %s has no bulk loader (set Config.NoLoader if that is intended)", h.cfg.Protocol)
	}
	return l
}

func loadKey(i int) string { return fmt.Sprintf("load/%d", i) }

func testLoad(t *testing.T, h *harness) {
	n := h.cfg.LoadItems
	capacity := max(h.cfg.Capacity, n+16)
	s := h.mustOpen(func(c *kv.Config) { c.Capacity = capacity })
	l := loader(t, h, s)
	val := func(i int) []byte { return valueOf(fmt.Sprint("load", i), i%(h.cfg.ValueSize+1)) }
	items := func(yield func(string, []byte) bool) {
		// A duplicate first: the later item of a key wins.
		if !yield(loadKey(0), []byte("superseded")) {
			return
		}
		for i := range n {
			if !yield(loadKey(i), val(i)) {
				return
			}
		}
	}
	got, err := l.Load(t.Context(), items)
	if err != nil || got != n {
		t.Fatalf("Load of %d distinct keys = %d, %v; want %d, nil", n, got, err, n)
	}
	want := model{}
	for i := range n {
		want[loadKey(i)] = val(i)
	}
	want.check(t, s, loadKey(n))
	_, err = l.Load(t.Context(), itemsOf(map[string][]byte{"late": []byte("x")}))
	wantErr(t, "a second Load", err, kv.ErrNotEmpty)
	wantMissing(t, s, "late")
	// The loaded store serves ordinary operations and survives a restart.
	mustPut(t, s, "after-load", []byte("x"))
	want["after-load"] = []byte("x")
	mustDelete(t, s, loadKey(1))
	delete(want, loadKey(1))
	closeStore(t, s)
	s = h.mustOpen(func(c *kv.Config) { c.Capacity = capacity })
	want.check(t, s, loadKey(1))
}

func testLoadNonEmpty(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	mustPut(t, s, "k", []byte("v"))
	l := loader(t, h, s)
	_, err := l.Load(t.Context(), itemsOf(map[string][]byte{"k": []byte("loaded"), "x": []byte("loaded")}))
	wantErr(t, "Load on a store holding a key", err, kv.ErrNotEmpty)
	wantValue(t, s, "k", []byte("v"))
	wantMissing(t, s, "x")
	wantKeys(t, s, 1)
}

func testLoadTooLarge(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	l := loader(t, h, s)
	long := strings.Repeat("k", h.cfg.MaxKeySize+1)
	_, err := l.Load(t.Context(), itemsOf(map[string][]byte{long: []byte("x")}))
	wantErr(t, "Load of an oversized key", err, kv.ErrKeyTooLarge)
	items := func(yield func(string, []byte) bool) {
		_ = yield("ok", []byte("fine")) && yield("big", valueOf("big", h.cfg.ValueSize+1))
	}
	_, err = l.Load(t.Context(), items)
	wantErr(t, "Load of an oversized value", err, kv.ErrValueTooLarge)
	wantMissing(t, s, "big")
}

// testLoadOverCapacity loads one item more than the capacity: the Load
// fails with ErrFull and leaves a consistent store, whose key count is the
// number of keys it serves, and which fills up to exactly its capacity.
func testLoadOverCapacity(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	l := loader(t, h, s)
	n := h.cfg.Capacity
	items := func(yield func(string, []byte) bool) {
		for i := range n + 1 {
			if !yield(loadKey(i), []byte(loadKey(i))) {
				return
			}
		}
	}
	_, err := l.Load(t.Context(), items)
	wantErr(t, fmt.Sprintf("Load of %d keys into a store of capacity %d", n+1, n), err, kv.ErrFull)
	served := 0
	for i := range n + 1 {
		got, ok, err := s.Get(t.Context(), loadKey(i))
		if err != nil {
			t.Fatalf("Get(%q) after the failed Load: %v", loadKey(i), err)
		}
		if ok {
			served++
			if string(got) != loadKey(i) {
				t.Errorf("Get(%q) after the failed Load = %s; want %q", loadKey(i), show(got), loadKey(i))
			}
		}
	}
	if keys := s.Stats().Keys; keys != int64(served) {
		t.Errorf("after the failed Load, Stats().Keys = %d but %d keys are served", keys, served)
	}
	for i := served; i < n; i++ {
		mustPut(t, s, capKey(i), capVal(i))
	}
	wantErr(t, "Put of a new key once the store is full", s.Put(t.Context(), "one-too-many", []byte("x")), kv.ErrFull)
}

// storedAddrs returns every address of b except the metadata record.
func storedAddrs(t *testing.T, b backend.Backend) []string {
	t.Helper()
	var addrs []string
	err := b.Scan(t.Context(), "", func(a string) error {
		if a != kv.MetaAddr {
			addrs = append(addrs, a)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scanning storage: %v", err)
	}
	return addrs
}

// tamperedTest writes keys, closes the store, lets tamper change the raw
// storage, reopens it and requires that every key either fails to open or
// fails its Get with kv.ErrTampered: never wrong data, never "missing".
func tamperedTest(t *testing.T, h *harness, tamper func(b backend.Backend, addrs []string, vals [][]byte) []backend.Item) {
	s := h.mustOpen(nil)
	want := model{}
	for i := range 8 {
		k, v := capKey(i), capVal(i)
		mustPut(t, s, k, v)
		want[k] = v
	}
	closeStore(t, s)
	h.raw(func(b backend.Backend) {
		addrs := storedAddrs(t, b)
		if len(addrs) < 2 {
			t.Fatalf("storage holds %d addresses besides %s after 8 Puts; the tamper test needs 2", len(addrs), kv.MetaAddr)
		}
		vals, err := b.Read(t.Context(), addrs)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Write(t.Context(), tamper(b, addrs, vals)); err != nil {
			t.Fatal(err)
		}
	})
	s, err := h.tryOpen(nil)
	if err != nil {
		if !errors.Is(err, kv.ErrTampered) {
			t.Fatalf("reopening tampered storage: %v; want success or an error wrapping kv.ErrTampered", err)
		}
		return
	}
	for k := range want {
		got, ok, err := s.Get(t.Context(), k)
		if !errors.Is(err, kv.ErrTampered) {
			t.Errorf("Get(%q) on tampered storage = %s, %v, %v; want an error wrapping kv.ErrTampered", k, show(got), ok, err)
		}
	}
}

func testTamperFlip(t *testing.T, h *harness) {
	tamperedTest(t, h, func(_ backend.Backend, addrs []string, vals [][]byte) []backend.Item {
		items := make([]backend.Item, len(addrs))
		for i, v := range vals {
			if len(v) == 0 {
				v = []byte{1}
			} else {
				bit := (i * 131) % (8 * len(v)) // a different bit in each block
				v[bit/8] ^= 1 << (bit % 8)
			}
			items[i] = backend.Item{Addr: addrs[i], Value: v}
		}
		return items
	})
}

func testTamperSwap(t *testing.T, h *harness) {
	tamperedTest(t, h, func(_ backend.Backend, addrs []string, vals [][]byte) []backend.Item {
		// Every block moves to another address, intact.
		items := make([]backend.Item, len(addrs))
		for i := range addrs {
			items[i] = backend.Item{Addr: addrs[i], Value: vals[(i+1)%len(vals)]}
		}
		return items
	})
}

func testConcurrent(t *testing.T, h *harness) {
	const goroutines, rounds = 16, 6
	per := min(4, h.cfg.Capacity/goroutines)
	s := h.mustOpen(nil)
	key := func(g, j int) string { return fmt.Sprintf("c%d/%d", g, j) }
	val := func(g, j, r int) []byte { return valueOf(fmt.Sprint(g, j, r), 1+(g+j+r)%h.cfg.ValueSize) }
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	before := s.Stats()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				for j := range per {
					if err := s.Put(ctx, key(g, j), val(g, j, r)); err != nil {
						t.Errorf("Put(%q): %v", key(g, j), err)
						cancel()
						return
					}
					got, ok, err := s.Get(ctx, key(g, j))
					if err != nil || !ok || !bytes.Equal(got, val(g, j, r)) {
						t.Errorf("Get(%q) right after its Put = %s, %v, %v; want %s", key(g, j), show(got), ok, err, show(val(g, j, r)))
						cancel()
						return
					}
				}
			}
			if err := s.Delete(ctx, key(g, 0)); err != nil {
				t.Errorf("Delete(%q): %v", key(g, 0), err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	d := s.Stats()
	ops := uint64(goroutines * per * rounds)
	if d.Puts-before.Puts != ops || d.Gets-before.Gets != ops || d.Deletes-before.Deletes != goroutines {
		t.Errorf("Stats counted %d puts, %d gets, %d deletes; want %d, %d, %d",
			d.Puts-before.Puts, d.Gets-before.Gets, d.Deletes-before.Deletes, ops, ops, goroutines)
	}
	want := model{}
	var gone []string
	for g := range goroutines {
		gone = append(gone, key(g, 0))
		for j := 1; j < per; j++ {
			want[key(g, j)] = val(g, j, rounds-1)
		}
	}
	want.check(t, s, gone...)
}
