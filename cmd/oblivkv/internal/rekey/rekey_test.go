package rekey_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/redis"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/rekey"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/kv"
	testprotocol "github.com/oblivkv/oblivkv/kv/kvtest/fixture"
	"github.com/oblivkv/oblivkv/observe"
	_ "github.com/oblivkv/oblivkv/protocol/all"
	"github.com/oblivkv/oblivkv/protocol/waffle"
	"github.com/oblivkv/oblivkv/seal"
)

// rekeyed are the protocols: rekey supports every one.
var rekeyed = []string{"treebeard", "taostore", "oblivistore", "pathoram", "cloak", "waffle", "encrypted", "plain"}

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
	return setup.OpenBackend(ctx, "disk", f.dir, false)
}

// open opens the store under the key in path.
func (f *fixture) open(path string) (kv.Store, error) {
	return f.openTapped(path, nil)
}

// openTapped opens the store under the key in path, its calls to storage
// recorded in log (nil: none).
func (f *fixture) openTapped(path string, log observe.Sink) (kv.Store, error) {
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
		ValueSize: 32, TapLog: log, OpenJournal: journal.Opener(filepath.Join(f.dir, "journal"), journal.Options{})})
	if err != nil {
		b.Close()
	}
	return s, err
}

// fill creates the store with a new key and puts keys k0..k(n-1).
func (f *fixture) fill(n int) { f.fillOps(n, n) }

// fillOps creates the store with a new key and puts ops values to keys
// k0..k(n-1) in turn.
func (f *fixture) fillOps(n, ops int) {
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
	for i := range ops {
		if err := s.Put(f.t.Context(), fmt.Sprintf("k%d", i%n), []byte(fmt.Sprintf("v%d", i%n))); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) keyFile(suffix string) string { return filepath.Join(f.dir, "key"+suffix) }

func (f *fixture) rekey() (rekey.Result, error) {
	return rekey.Run(f.t.Context(), f.options(nil))
}

// options are rekey's options for the store, its calls to storage
// recorded in log (nil: none).
func (f *fixture) options(log *observe.MemoryLog) rekey.Options {
	var sink observe.Sink
	if log != nil {
		sink = log
	}
	o := rekey.Options{DataDir: f.dir,
		OpenStore: func(context.Context) (kv.Store, error) { return f.openTapped(f.keyFile(""), sink) }}
	o.OpenBackend = func(ctx context.Context) (backend.Backend, error) {
		b, err := f.openBackend(ctx)
		if err != nil || log == nil {
			return b, err
		}
		return observe.NewTap(b, log), nil
	}
	return o
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
	state := f.resealState()
	underNew, err := p.Reseal(kv.ResealEnv{From: cur, To: cur, ValueSize: 32, State: state})
	if err != nil {
		f.t.Fatal(err)
	}
	underOld, err := p.Reseal(kv.ResealEnv{From: old, To: old, ValueSize: 32, State: state})
	if err != nil {
		f.t.Fatal(err)
	}
	other, _ := seal.GenerateMaster()
	otherKeys, _ := seal.NewKeys(other)
	underAny, err := p.Reseal(kv.ResealEnv{From: otherKeys, To: otherKeys, ValueSize: 32, State: state})
	if err != nil {
		f.t.Fatal(err)
	}
	b, err := f.openBackend(f.t.Context())
	if err != nil {
		f.t.Fatal(err)
	}
	defer b.Close()
	sealed, checked := 0, 0
	err = backend.ReadAll(f.t.Context(), b, "", 0, func(items []backend.Item) error {
		for _, it := range items {
			if strings.HasPrefix(it.Addr, backend.FenceKeyPrefix) || strings.HasPrefix(it.Addr, "p/") {
				continue // not sealed
			}
			sealed++
			if err := opens(underNew, cur, it); err != nil {
				return fmt.Errorf("%q does not open under the new key: %w", it.Addr, err)
			}
			if leftOver(underAny, it) {
				continue
			}
			checked++
			if opens(underOld, old, it) == nil {
				return fmt.Errorf("%q opens under the old key", it.Addr)
			}
			// Waffle's Resealer knows no old address once objects moved:
			// try the seal bound to the address itself too.
			if _, err := old.Open(nil, []byte(it.Addr), it.Value); err == nil {
				return fmt.Errorf("%q opens under the old key", it.Addr)
			}
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if checked == 0 || checked < sealed/2 {
		f.t.Fatalf("of %d sealed items, %d checked against the old key", sealed, checked)
	}
}

// resealState opens and closes the store and returns its ResealState
// (nil for a store that is no kv.ResealStater).
func (f *fixture) resealState() []byte {
	f.t.Helper()
	s, err := f.open(f.keyFile(""))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		f.t.Fatal(err)
	}
	r, ok := kv.AsResealStater(s)
	if !ok {
		return nil
	}
	state, err := r.ResealState()
	if err != nil {
		f.t.Fatal(err)
	}
	return state
}

// leftOver reports whether the Resealer of storage under any key takes
// it: an ObliviStore slot of an emptied layout, which the store never reads
// again and its Resealer replaces with a dummy whatever it holds.
func leftOver(any kv.Resealer, it backend.Item) bool {
	_, ok, err := any.Reseal(it.Addr, it.Value)
	return ok && err == nil
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

// TestRekeyEveryProtocol fills a store of every protocol on disk, and of
// treebeard, taostore, cloak and oblivistore on Redis, re-keys it, and
// reopens it:
// every key reads back under the new key, the old key opens neither the
// store nor the journal, and no item of storage opens under it.
func TestRekeyEveryProtocol(t *testing.T) {
	for _, protocol := range rekeyed {
		t.Run(protocol+"/disk", func(t *testing.T) { rekeyAndCheck(t, newFixture(t, protocol, "", 64)) })
	}
	for _, protocol := range rekeyed {
		t.Run(protocol+"/redis", func(t *testing.T) { rekeyAndCheck(t, newFixture(t, protocol, redistest.Start(t), 64)) })
	}
}

func rekeyAndCheck(t *testing.T, f *fixture) {
	const n = 40
	f.fill(n)
	before := f.objectAddrs()
	if (f.protocol == "waffle") != (len(before) > 0) {
		t.Fatalf("%d waffle objects in a store of %s", len(before), f.protocol)
	}
	res, err := f.rekey()
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed || res.Items == 0 {
		t.Fatalf("rekey result %+v", res)
	}
	if after := f.objectAddrs(); len(after) != len(before) || slices.ContainsFunc(after, func(a string) bool { return slices.Contains(before, a) }) {
		t.Fatalf("waffle's %d objects are at %d addresses after the rekey, not all new", len(before), len(after))
	}
	f.checkReadsBack(n)
	f.checkOnlyNewKey()
	// A second rekey waits for the first one's old key to go.
	if _, err := f.rekey(); err == nil || !strings.Contains(err.Error(), "--remove-old-key") {
		t.Fatalf("a rekey beside key.old: %v", err)
	}
	if err := rekey.RemoveOldKey(f.dir); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rekey(); err != nil {
		t.Fatalf("a second rekey: %v", err)
	}
	f.checkReadsBack(n)
	f.checkOnlyNewKey()
}

// objectAddrs returns the addresses of Waffle's objects in storage (none
// for another protocol): PRFs under the current key, which a rekey moves.
func (f *fixture) objectAddrs() []string {
	var addrs []string
	withBackend(f.t, f, func(b backend.Backend) {
		for _, it := range readAll(f.t, b) {
			if strings.HasPrefix(it.Addr, waffle.ObjectPrefix) {
				addrs = append(addrs, it.Addr)
			}
		}
	})
	return addrs
}

// TestRekeyRefusesUnsupported: a protocol that registers no Resealer (the
// test fixture's) is refused before anything is written.
func TestRekeyRefusesUnsupported(t *testing.T) {
	f := newFixture(t, testprotocol.Name, "", 64)
	f.fill(3)
	if _, err := f.rekey(); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("rekey of %s: %v", testprotocol.Name, err)
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
	if _, err := f.rekey(); !errors.Is(err, kv.ErrWrongKey) {
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
	for _, protocol := range []string{"treebeard", "pathoram"} {
		t.Run(protocol, func(t *testing.T) { stopsAtTamperedItem(t, protocol) })
	}
}

func stopsAtTamperedItem(t *testing.T, protocol string) {
	f := newFixture(t, protocol, "", 64)
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
	_, err := f.rekey()
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

// TestRekeyResumesAtEveryStep stops a rekey of treebeard, and of waffle,
// whose objects move (a crash between a batch's Write and its Delete
// leaves them at both addresses), after each of its steps in turn (the Step hook panics there: files and storage are left as a
// crash would leave them),
// then runs it again: it finishes, and the store reads back under the new
// key only.
func TestRekeyResumesAtEveryStep(t *testing.T) {
	for _, protocol := range []string{"treebeard", "waffle"} {
		t.Run(protocol, func(t *testing.T) { resumesAtEveryStep(t, protocol) })
	}
}

func resumesAtEveryStep(t *testing.T, protocol string) {
	for stop := 1; ; stop++ {
		f := newFixture(t, protocol, "", 64)
		f.fill(10)
		steps, crashed := 0, false
		func() {
			defer func() {
				if r := recover(); r != nil {
					crashed = true
				}
			}()
			o := f.options(nil)
			o.Step = func(string) {
				if steps++; steps == stop {
					panic("crash")
				}
			}
			rekey.Run(t.Context(), o)
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
		if _, err := f.rekey(); err != nil {
			t.Fatalf("resuming after step %d: %v", stop, err)
		}
		f.checkReadsBack(10)
		f.checkOnlyNewKey()
	}
}

// TestRekeyShowsStorageOnlyItsSize: for every protocol, the pass of a
// rekey reads every address storage holds once, in ascending order, 512 a
// Read, and writes each Read's addresses back at once, each in the size it
// had: a function of the set of addresses storage holds. Re-keying a store
// after 60 writes to 2 keys and one after 60 writes to 60 keys (same
// protocol and capacity) then shows storage the same pass where that set
// follows from the capacity (treebeard, taostore, pathoram, cloak: the
// same addresses; waffle: addresses that are PRFs, in the same number and
// sizes), and the same kinds, counts and sizes of calls for the open and
// close before it (but cloak's, which runs batches at a fixed rate,
// however many the clock allows). The baselines hold one address per key,
// and oblivistore's levels follow secret random choices, each written
// whole where storage saw it: there the set itself differs.
func TestRekeyShowsStorageOnlyItsSize(t *testing.T) {
	same := map[string]func(a, b observe.Record) bool{"treebeard": sameCall, "taostore": sameCall,
		"pathoram": sameCall, "cloak": sameCall, "waffle": sameShape}
	for _, protocol := range rekeyed {
		t.Run(protocol, func(t *testing.T) {
			few, many := tapOf(t, protocol, 2), tapOf(t, protocol, 60)
			fewPass, manyPass := few.calls[passStart(t, few.calls):], many.calls[passStart(t, many.calls):]
			checkEveryAddressOnce(t, fewPass, few.stored)
			checkEveryAddressOnce(t, manyPass, many.stored)
			if same[protocol] == nil {
				return
			}
			if !slices.EqualFunc(fewPass, manyPass, same[protocol]) {
				t.Fatalf("storage saw different passes for 2 keys and for 60 (%d and %d calls)", len(fewPass), len(manyPass))
			}
			if protocol != "cloak" && !slices.EqualFunc(few.calls[:len(few.calls)-len(fewPass)], many.calls[:len(many.calls)-len(manyPass)], sameShape) {
				t.Fatal("storage saw a different open and close for 2 keys and for 60")
			}
		})
	}
}

// tapped is what storage saw of a rekey, and the addresses it held after.
type tapped struct {
	calls  []observe.Record
	stored []string
}

func tapOf(t *testing.T, protocol string, keys int) tapped {
	f := newFixture(t, protocol, "", 64)
	f.fillOps(keys, 60)
	log := &observe.MemoryLog{}
	if _, err := rekey.Run(t.Context(), f.options(log)); err != nil {
		t.Fatal(err)
	}
	var stored []string
	withBackend(t, f, func(b backend.Backend) {
		for _, it := range readAll(t, b) {
			stored = append(stored, it.Addr)
		}
	})
	return tapped{calls: log.Records(), stored: stored}
}

// passStart returns where the pass begins in a rekey's calls: the Read of
// the metadata record before the pass's Scan of every address.
func passStart(t *testing.T, recs []observe.Record) int {
	t.Helper()
	scan := slices.IndexFunc(recs, func(r observe.Record) bool { return r.Op == observe.OpScan && r.Addrs[0] == "" })
	if scan < 1 {
		t.Fatalf("storage saw no scan of every address")
	}
	return scan - 1
}

// checkEveryAddressOnce checks a rekey's pass: a Read of the metadata
// record (the protocol's look-up), a Scan, then Reads of full batches of
// backend.ReadAllBatch addresses (the last one less), in ascending order,
// each followed by a Write of as many items in the sizes read (but the
// metadata record's, see sameSizes), at the addresses read or, for items
// that move (waffle's), elsewhere, and then a Delete of the addresses
// they moved from; what storage holds after is what the Reads read, less
// what was deleted, with what was written.
func checkEveryAddressOnce(t *testing.T, pass []observe.Record, after []string) {
	t.Helper()
	if len(pass) < 4 || pass[0].Op != observe.OpRead || !slices.Equal(pass[0].Addrs, []string{kv.MetaAddr}) {
		t.Fatalf("the pass: %d calls, the first a %v of %q", len(pass), pass[0].Op, pass[0].Addrs)
	}
	held := map[string]bool{}
	last := ""
	for i := 2; i < len(pass); i += 2 {
		r, w := pass[i], pass[i+1]
		if r.Op != observe.OpRead || w.Op != observe.OpWrite || len(w.Addrs) != len(r.Addrs) || !sameSizes(w, r) {
			t.Fatalf("calls %d and %d: a %v and a %v of other sizes", i, i+1, r.Op, w.Op)
		}
		if len(r.Addrs) != backend.ReadAllBatch && i+2 < len(pass) && pass[i+2].Op == observe.OpRead {
			t.Fatalf("Read %d of %d addresses before the last", i, len(r.Addrs))
		}
		for _, a := range r.Addrs {
			if a <= last {
				t.Fatalf("address %q read after %q", a, last)
			}
			last, held[a] = a, true
		}
		if i+2 < len(pass) && pass[i+2].Op == observe.OpDelete {
			checkMovedFrom(t, r, w, pass[i+2], held)
			i++
		} else if !slices.Equal(w.Addrs, r.Addrs) {
			t.Fatalf("call %d writes items elsewhere and deletes nothing", i+1)
		}
		for _, a := range w.Addrs {
			held[a] = true
		}
	}
	if got := slices.Sorted(maps.Keys(held)); !slices.Equal(got, slices.Sorted(slices.Values(after))) {
		t.Fatalf("storage holds %d addresses after the rekey; the pass read, moved and wrote %d", len(after), len(got))
	}
}

// checkMovedFrom checks that d deletes the addresses Read r read that
// Write w did not write, and marks them deleted in held.
func checkMovedFrom(t *testing.T, r, w, d observe.Record, held map[string]bool) {
	t.Helper()
	var moved []string
	for _, a := range r.Addrs {
		if !slices.Contains(w.Addrs, a) {
			moved = append(moved, a)
		}
	}
	if !slices.Equal(d.Addrs, moved) {
		t.Fatalf("a Delete of %d addresses after a Write that moved %d", len(d.Addrs), len(moved))
	}
	for _, a := range moved {
		delete(held, a)
	}
}

// sameSizes reports whether the items of two calls of the same addresses
// have the same sizes, but the metadata record's: a store's first rekey
// adds the PRF key to it.
func sameSizes(a, b observe.Record) bool {
	for i, addr := range a.Addrs {
		if addr != kv.MetaAddr && a.Sizes[i] != b.Sizes[i] {
			return false
		}
	}
	return true
}

func sameCall(a, b observe.Record) bool {
	return sameShape(a, b) && slices.Equal(a.Addrs, b.Addrs)
}

func sameShape(a, b observe.Record) bool {
	return a.Op == b.Op && len(a.Addrs) == len(b.Addrs) && slices.Equal(a.Sizes, b.Sizes)
}
