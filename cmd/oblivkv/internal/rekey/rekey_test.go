package rekey_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/backend/redis"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/rekey"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	_ "github.com/oblivkv/oblivkv/protocol/all"
	"github.com/oblivkv/oblivkv/seal"
)

// rekeyed are the protocols rekey supports: those whose items' associated
// data storage alone tells.
var rekeyed = []string{"treebeard", "taostore", "waffle", "encrypted", "plain"}

// fixture is a store in a data directory: its key file and journal there,
// its storage on disk there or on a Redis server.
type fixture struct {
	t        *testing.T
	dir      string
	redis    string // "" for the disk backend
	protocol string
	capacity int
}

func newFixture(t *testing.T, protocol, redisURL string, capacity int) *fixture {
	return &fixture{t: t, dir: t.TempDir(), redis: redisURL, protocol: protocol, capacity: capacity}
}

func (f *fixture) openBackend(ctx context.Context) (backend.Backend, error) {
	if f.redis != "" {
		return redis.Open(ctx, f.redis)
	}
	return disk.Open(filepath.Join(f.dir, "store"))
}

// open opens the store under the key in path.
func (f *fixture) open(path string) (kv.Store, error) {
	master, err := seal.ReadKeyFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := seal.NewKeys(master)
	if err != nil {
		return nil, err
	}
	b, err := f.openBackend(f.t.Context())
	if err != nil {
		return nil, err
	}
	s, err := kv.Open(f.t.Context(), kv.Config{Protocol: f.protocol, Backend: b, Keys: keys, Capacity: f.capacity,
		ValueSize: 32, OpenJournal: journal.Opener(filepath.Join(f.dir, "journal"), journal.Options{})})
	if err != nil {
		b.Close()
	}
	return s, err
}

// fill creates the store with a new key and puts keys k0..k(n-1).
func (f *fixture) fill(n int) {
	f.t.Helper()
	master, err := seal.GenerateMaster()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := seal.WriteKeyFile(f.keyFile(""), master); err != nil {
		f.t.Fatal(err)
	}
	s, err := f.open(f.keyFile(""))
	if err != nil {
		f.t.Fatal(err)
	}
	for i := range n {
		if err := s.Put(f.t.Context(), fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("v%d", i))); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) keyFile(suffix string) string { return filepath.Join(f.dir, "key"+suffix) }

func (f *fixture) rekey(b func(context.Context) (backend.Backend, error)) (rekey.Result, error) {
	if b == nil {
		b = f.openBackend
	}
	return rekey.Run(f.t.Context(), rekey.Options{DataDir: f.dir, OpenBackend: b})
}

// checkReadsBack opens the store under its key and reads every key.
func (f *fixture) checkReadsBack(n int) {
	f.t.Helper()
	s, err := f.open(f.keyFile(""))
	if err != nil {
		f.t.Fatalf("the store does not open under the new key: %v", err)
	}
	defer s.Close()
	for i := range n {
		v, ok, err := s.Get(f.t.Context(), fmt.Sprintf("k%d", i))
		if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
			f.t.Fatalf("after rekey, k%d = %q, %v, %v", i, v, ok, err)
		}
	}
}

// checkOnlyNewKey checks that every sealed item of storage opens under
// the new key and none under the old one, and that the old key opens
// neither the store nor its journal.
func (f *fixture) checkOnlyNewKey() {
	f.t.Helper()
	old, cur := f.keys(".old"), f.keys("")
	if s, err := f.open(f.keyFile(".old")); !errors.Is(err, kv.ErrWrongKey) {
		if s != nil {
			s.Close()
		}
		f.t.Fatalf("the old key opens the store: %v", err)
	}
	if _, err := journal.Open(filepath.Join(f.dir, "journal"), old, journal.Options{}); !errors.Is(err, journal.ErrWrongKey) {
		f.t.Fatalf("the journal under the old key: %v, want ErrWrongKey", err)
	}
	p, _ := kv.Lookup(f.protocol)
	underNew := p.Reseal(kv.ResealEnv{From: cur, To: cur, ValueSize: 32})
	underOld := p.Reseal(kv.ResealEnv{From: old, To: old, ValueSize: 32})
	b, err := f.openBackend(f.t.Context())
	if err != nil {
		f.t.Fatal(err)
	}
	defer b.Close()
	sealed := 0
	err = backend.ReadAll(f.t.Context(), b, "", 0, func(items []backend.Item) error {
		for _, it := range items {
			if strings.HasPrefix(it.Addr, backend.FenceKeyPrefix) || strings.HasPrefix(it.Addr, "p/") {
				continue // not sealed
			}
			sealed++
			if err := opens(underNew, cur, it); err != nil {
				return fmt.Errorf("%q does not open under the new key: %w", it.Addr, err)
			}
			if opens(underOld, old, it) == nil {
				return fmt.Errorf("%q opens under the old key", it.Addr)
			}
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if sealed == 0 {
		f.t.Fatal("storage holds no sealed item")
	}
}

// opens reports whether it opens under keys, by the Resealer r from keys
// to keys.
func opens(r kv.Resealer, keys *seal.Keys, it backend.Item) error {
	if it.Addr == kv.MetaAddr {
		_, err := kv.ResealMeta(keys, keys, it.Value)
		return err
	}
	_, ok, err := r.Reseal(it.Addr, it.Value)
	if !ok {
		_, err = seal.Reseal(keys, keys, nil, []byte(it.Addr), it.Value)
	}
	return err
}

func (f *fixture) keys(suffix string) *seal.Keys {
	f.t.Helper()
	master, err := seal.ReadKeyFile(f.keyFile(suffix))
	if err != nil {
		f.t.Fatal(err)
	}
	k, err := seal.NewKeys(master)
	if err != nil {
		f.t.Fatal(err)
	}
	return k
}

// TestRekeyEveryProtocol fills a store of every protocol rekey supports on
// disk, and of treebeard and taostore on Redis, re-keys it, and reopens it:
// every key reads back under the new key, the old key opens neither the
// store nor the journal, and no item of storage opens under it.
func TestRekeyEveryProtocol(t *testing.T) {
	for _, protocol := range rekeyed {
		t.Run(protocol+"/disk", func(t *testing.T) { rekeyAndCheck(t, newFixture(t, protocol, "", 64)) })
	}
	for _, protocol := range []string{"treebeard", "taostore"} {
		t.Run(protocol+"/redis", func(t *testing.T) { rekeyAndCheck(t, newFixture(t, protocol, redistest.Start(t), 64)) })
	}
}

func rekeyAndCheck(t *testing.T, f *fixture) {
	const n = 40
	f.fill(n)
	res, err := f.rekey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed || res.Items == 0 {
		t.Fatalf("rekey result %+v", res)
	}
	f.checkReadsBack(n)
	f.checkOnlyNewKey()
	// A second rekey waits for the first one's old key to go.
	if _, err := f.rekey(nil); err == nil || !strings.Contains(err.Error(), "--remove-old-key") {
		t.Fatalf("a rekey beside key.old: %v", err)
	}
	if err := rekey.RemoveOldKey(f.dir); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rekey(nil); err != nil {
		t.Fatalf("a second rekey: %v", err)
	}
	f.checkReadsBack(n)
	f.checkOnlyNewKey()
}

// TestRekeyRefusesUnsupported: a protocol whose associated data is
// trusted state is refused before anything is written.
func TestRekeyRefusesUnsupported(t *testing.T) {
	f := newFixture(t, "pathoram", "", 64)
	f.fill(3)
	if _, err := f.rekey(nil); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("rekey of pathoram: %v", err)
	}
	checkUntouched(t, f)
	f.checkReadsBack(3)
}

// checkUntouched checks a refused rekey left no new key and no marker.
func checkUntouched(t *testing.T, f *fixture) {
	t.Helper()
	for _, name := range []string{"key.new", "rekey"} {
		if _, err := os.Stat(filepath.Join(f.dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after a refused rekey: %v", name, err)
		}
	}
	if err := rekey.Unfinished(f.dir); err != nil {
		t.Fatal(err)
	}
}

// TestRekeyWrongKey: a key file that does not open the store is refused
// before anything is written.
func TestRekeyWrongKey(t *testing.T) {
	f := newFixture(t, "treebeard", "", 64)
	f.fill(3)
	real, err := os.ReadFile(f.keyFile(""))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := seal.GenerateMaster()
	os.Remove(f.keyFile(""))
	if err := seal.WriteKeyFile(f.keyFile(""), other); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rekey(nil); !errors.Is(err, kv.ErrWrongKey) {
		t.Fatalf("rekey under a wrong key: %v, want ErrWrongKey", err)
	}
	checkUntouched(t, f)
	if err := os.WriteFile(f.keyFile(""), real, 0o600); err != nil {
		t.Fatal(err)
	}
	f.checkReadsBack(3)
}

// TestRekeyStopsAtTamperedItem: an item storage altered stops the rekey
// with kv.ErrTampered, and the batch holding it is not written; the store
// is refused until a rekey finishes.
func TestRekeyStopsAtTamperedItem(t *testing.T) {
	f := newFixture(t, "treebeard", "", 64)
	f.fill(10)
	var victim backend.Item
	withBackend(t, f, func(b backend.Backend) {
		all := readAll(t, b)
		victim = all[len(all)/2]
		victim.Value = slices.Clone(victim.Value)
		victim.Value[len(victim.Value)-1] ^= 1
		if err := b.Write(t.Context(), []backend.Item{victim}); err != nil {
			t.Fatal(err)
		}
	})
	_, err := f.rekey(nil)
	if !errors.Is(err, kv.ErrTampered) || !strings.Contains(err.Error(), fmt.Sprintf("%q", victim.Addr)) {
		t.Fatalf("rekey of tampered storage: %v, want ErrTampered naming %q", err, victim.Addr)
	}
	withBackend(t, f, func(b backend.Backend) {
		for _, it := range readAll(t, b) {
			if it.Addr == victim.Addr && !slices.Equal(it.Value, victim.Value) {
				t.Fatal("the tampered item was written")
			}
		}
	})
	if err := rekey.Unfinished(f.dir); !errors.Is(err, rekey.ErrUnfinished) {
		t.Fatalf("after a stopped rekey, Unfinished = %v", err)
	}
	if err := rekey.RemoveOldKey(f.dir); !errors.Is(err, rekey.ErrUnfinished) {
		t.Fatalf("RemoveOldKey during a rekey: %v", err)
	}
}

func withBackend(t *testing.T, f *fixture, fn func(backend.Backend)) {
	t.Helper()
	b, err := f.openBackend(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fn(b)
}

func readAll(t *testing.T, b backend.Backend) []backend.Item {
	t.Helper()
	var all []backend.Item
	err := backend.ReadAll(t.Context(), b, "", 0, func(items []backend.Item) error {
		for _, it := range items {
			all = append(all, backend.Item{Addr: it.Addr, Value: slices.Clone(it.Value)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// TestRekeyResumesAtEveryStep stops a rekey after each of its steps in
// turn (the Step hook panics there: files and storage are left as a
// crash would leave them),
// then runs it again: it finishes, and the store reads back under the new
// key only.
func TestRekeyResumesAtEveryStep(t *testing.T) {
	for stop := 1; ; stop++ {
		f := newFixture(t, "treebeard", "", 64)
		f.fill(10)
		steps, crashed := 0, false
		func() {
			defer func() {
				if r := recover(); r != nil {
					crashed = true
				}
			}()
			rekey.Run(t.Context(), rekey.Options{DataDir: f.dir, OpenBackend: f.openBackend, Step: func(string) {
				if steps++; steps == stop {
					panic("crash")
				}
			}})
		}()
		if !crashed {
			t.Logf("stopped after each of the %d steps", stop-1)
			return
		}
		// Only the new key is written before the marker: a store stopped
		// there is not re-keyed at all, and its next rekey starts afresh.
		if err := rekey.Unfinished(f.dir); (stop == 1) != (err == nil) {
			t.Fatalf("stopped after step %d, Unfinished = %v", stop, err)
		}
		if _, err := f.rekey(nil); err != nil {
			t.Fatalf("resuming after step %d: %v", stop, err)
		}
		f.checkReadsBack(10)
		f.checkOnlyNewKey()
	}
}

// TestRekeyShowsStorageOnlyItsSize: re-keying a store holding 2 keys and
// one holding 60 (same protocol and capacity) shows storage the same calls:
// one Scan, then Reads and Writes of the same addresses in the same sizes,
// every address read once and written once, in ascending order. For
// Waffle, whose addresses are PRFs of each store's own keys, the kinds,
// counts and sizes are the same.
func TestRekeyShowsStorageOnlyItsSize(t *testing.T) {
	for _, protocol := range []string{"treebeard", "waffle"} {
		t.Run(protocol, func(t *testing.T) {
			few, many := tapOf(t, protocol, 2), tapOf(t, protocol, 60)
			checkOnceAscending(t, few)
			if protocol == "treebeard" && !slices.EqualFunc(few, many, sameCall) {
				t.Fatal("storage saw different calls for 2 keys and for 60")
			}
			if !slices.EqualFunc(few, many, sameShape) {
				t.Fatal("storage saw calls of different kinds or sizes for 2 keys and for 60")
			}
		})
	}
}

func tapOf(t *testing.T, protocol string, keys int) []observe.Record {
	f := newFixture(t, protocol, "", 64)
	f.fill(keys)
	log := &observe.MemoryLog{}
	_, err := f.rekey(func(ctx context.Context) (backend.Backend, error) {
		b, err := f.openBackend(ctx)
		if err != nil {
			return nil, err
		}
		return observe.NewTap(b, log), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return log.Records()
}

// checkOnceAscending checks a rekey's calls: Reads of the metadata
// record (the start's check of the key, the protocol's look-up), a Scan,
// then Reads and Writes by turns, each Write the batch its Read read,
// every address once, in ascending order.
func checkOnceAscending(t *testing.T, recs []observe.Record) {
	t.Helper()
	scan := slices.IndexFunc(recs, func(r observe.Record) bool { return r.Op == observe.OpScan })
	if scan < 0 || len(recs) < scan+3 || (len(recs)-scan)%2 != 1 {
		t.Fatalf("storage saw %d calls, the scan at %d", len(recs), scan)
	}
	for _, r := range recs[:scan] {
		if r.Op != observe.OpRead || !slices.Equal(r.Addrs, []string{kv.MetaAddr}) {
			t.Fatalf("before the scan, a %v of %q", r.Op, r.Addrs)
		}
	}
	var last string
	for i := scan + 1; i < len(recs); i += 2 {
		r, w := recs[i], recs[i+1]
		if r.Op != observe.OpRead || w.Op != observe.OpWrite || !slices.Equal(r.Addrs, w.Addrs) {
			t.Fatalf("call %d: %v then %v of other addresses", i, r.Op, w.Op)
		}
		for _, a := range r.Addrs {
			if a <= last {
				t.Fatalf("address %q read after %q", a, last)
			}
			last = a
		}
	}
}

func sameCall(a, b observe.Record) bool {
	return sameShape(a, b) && slices.Equal(a.Addrs, b.Addrs)
}

func sameShape(a, b observe.Record) bool {
	return a.Op == b.Op && len(a.Addrs) == len(b.Addrs) && slices.Equal(a.Sizes, b.Sizes)
}
