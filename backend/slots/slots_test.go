package slots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/backendtest"
)

var ctx = context.Background()

func TestConformance(t *testing.T) {
	for _, mode := range []string{"sync", "NoSync", "DeferSync"} {
		t.Run(mode, func(t *testing.T) {
			dirs := map[backend.Backend]string{}
			open := func(t *testing.T, dir string) backend.Backend {
				b, err := Open(dir, Options{NoSync: mode == "NoSync"})
				if err != nil {
					t.Fatal(err)
				}
				if mode == "DeferSync" {
					b.DeferSync()
				}
				t.Cleanup(func() { b.Close() })
				dirs[b] = dir
				return b
			}
			backendtest.Run(t,
				func(t *testing.T) backend.Backend { return open(t, t.TempDir()) },
				backendtest.WithReopen(func(t *testing.T, old backend.Backend) backend.Backend { return open(t, dirs[old]) }))
		})
	}
}

func TestSlotSize(t *testing.T) {
	prev := int64(0)
	for n := 0; n <= 1<<20; n += 1 + n/97 {
		s := slotSize(20, n)
		if s < int64(headerSize+20+n) || s%256 != 0 || s < prev {
			t.Fatalf("slotSize(20, %d) = %d (previous %d)", n, s, prev)
		}
		if waste := float64(s-int64(headerSize+20+n)) / float64(s); n > 4096 && waste > 1.0/16 {
			t.Fatalf("slotSize(20, %d) = %d wastes %.1f%%", n, s, 100*waste)
		}
		prev = s
	}
}

// crashable is a store on pebble's strict in-memory file system, where a
// crash keeps exactly what was synced.
type crashable struct {
	t  *testing.T
	fs *vfs.MemFS
	b  *Backend
	o  Options
}

func newCrashable(t *testing.T, o Options) *crashable {
	c := &crashable{t: t, fs: vfs.NewStrictMem(), o: o}
	c.o.FS = c.fs
	c.open()
	return c
}

func (c *crashable) open() {
	c.t.Helper()
	b, err := Open("/store", c.o)
	if err != nil {
		c.t.Fatal(err)
	}
	c.b = b
}

// crash loses everything not synced and opens the store again.
func (c *crashable) crash() {
	c.t.Helper()
	c.fs.SetIgnoreSyncs(true)
	c.b.Close()
	c.fs.ResetToSyncedState()
	c.fs.SetIgnoreSyncs(false)
	c.open()
}

// testValue returns a value of a size that lands inline or in one of a few
// slot sizes, naming its address and version.
func testValue(r *rand.Rand, addr string, version int) []byte {
	sizes := []int{0, 40, 300, 1000, 1500, 5000}
	v := bytes.Repeat([]byte{byte(version)}, sizes[r.IntN(len(sizes))])
	copy(v, fmt.Sprintf("%s@%d", addr, version))
	return v
}

// op is a Write of items, or a Delete of del.
type op struct {
	items []backend.Item
	del   string
}

// randomOp returns a Write of a few of addrs or, one time in six, a
// Delete of one.
func randomOp(r *rand.Rand, addrs []string, version int) op {
	if r.IntN(6) == 0 {
		return op{del: addrs[r.IntN(len(addrs))]}
	}
	var o op
	for range 1 + r.IntN(4) {
		a := addrs[r.IntN(len(addrs))]
		o.items = append(o.items, backend.Item{Addr: a, Value: testValue(r, a, version)})
	}
	return o
}

// do applies o and returns what each address it changed now holds (nil:
// missing).
func (c *crashable) do(o op) map[string][]byte {
	c.t.Helper()
	out := map[string][]byte{}
	if o.items == nil {
		if err := c.b.Delete(ctx, []string{o.del}); err != nil {
			c.t.Fatal(err)
		}
		out[o.del] = nil
		return out
	}
	if err := c.b.Write(ctx, o.items); err != nil {
		c.t.Fatal(err)
	}
	for _, it := range o.items {
		out[it.Addr] = it.Value
	}
	return out
}

func (c *crashable) read(addr string) []byte {
	c.t.Helper()
	v, err := c.b.Read(ctx, []string{addr})
	if err != nil {
		c.t.Fatalf("read %s: %v", addr, err)
	}
	return v[0]
}

func addresses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("a%02d", i)
	}
	return out
}

// With a sync per write, every acknowledged Write and Delete survives a
// crash, exactly, and the slots freed meanwhile were never ones the
// durable index still named.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	c := newCrashable(t, Options{})
	addrs := addresses(12)
	model := map[string][]byte{}
	for version := range 600 {
		for a, v := range c.do(randomOp(r, addrs, version%256)) {
			model[a] = v
		}
		if r.IntN(25) == 0 {
			c.crash()
		}
		for _, a := range addrs {
			if got := c.read(a); !bytes.Equal(got, model[a]) || (got == nil) != (model[a] == nil) {
				t.Fatalf("after change %d, %s holds %.12q, want %.12q", version, a, got, model[a])
			}
		}
	}
}

// With syncs deferred, a crash leaves the store exactly as it was at a
// sync point no earlier than the last Sync: a prefix of the Writes and
// Deletes, whole, whatever of the slots reached the disk.
func TestCrashDeferredKeepsAPrefix(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { crashDeferred(t, seed) })
	}
}

func crashDeferred(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	c := newCrashable(t, Options{NoSync: true})
	addrs := addresses(10)
	states := []map[string][]byte{{}} // the store after each change since the last Sync
	for version := range 400 {
		state := maps.Clone(states[len(states)-1])
		maps.Copy(state, c.do(randomOp(r, addrs, version%256)))
		states = append(states, state)
		switch r.IntN(20) {
		case 0:
			if err := c.b.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			states = states[len(states)-1:]
		case 1: // the slots reached the disk, the index did not
			if err := c.b.cs.syncAll(); err != nil {
				t.Fatal(err)
			}
		case 2:
			c.crash()
			got := map[string][]byte{}
			for _, a := range addrs {
				if v := c.read(a); v != nil {
					got[a] = v
				}
			}
			if !slices.ContainsFunc(states, func(s map[string][]byte) bool { return sameState(s, got) }) {
				t.Fatalf("after change %d and a crash, the store is in none of the %d states since the last Sync", version, len(states))
			}
			states = []map[string][]byte{got}
		}
	}
}

// sameState compares two stores' contents, a nil value meaning missing.
func sameState(a, b map[string][]byte) bool {
	present := func(m map[string][]byte) map[string][]byte {
		return maps.Collect(func(yield func(string, []byte) bool) {
			for k, v := range m {
				if v != nil && !yield(k, v) {
					return
				}
			}
		})
	}
	return maps.EqualFunc(present(a), present(b), bytes.Equal)
}

// Under DeferSync, redoing every Write and Delete since the last Sync
// after a crash, in order, as the journal does, leaves exactly what they
// left.
func TestCrashDeferSyncRedone(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { crashRedone(t, seed) })
	}
}

func crashRedone(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 11))
	c := newCrashable(t, Options{})
	c.b.DeferSync()
	addrs := addresses(10)
	model := map[string][]byte{}
	var since []op // every change since the last Sync, to redo
	for version := range 400 {
		o := randomOp(r, addrs, version%256)
		maps.Copy(model, c.do(o))
		since = append(since, o)
		switch r.IntN(20) {
		case 0:
			if err := c.b.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			since = nil
		case 1:
			if err := c.b.cs.syncAll(); err != nil {
				t.Fatal(err)
			}
		case 2:
			c.crash()
			c.b.DeferSync()
			for _, o := range since {
				c.do(o)
			}
			for _, a := range addrs {
				if got := c.read(a); !bytes.Equal(got, model[a]) || (got == nil) != (model[a] == nil) {
					t.Fatalf("after change %d, a crash and the redo, %s holds %.12q, want %.12q", version, a, got, model[a])
				}
			}
		}
	}
}

// current applies each address's last value since to synced.
func current(synced map[string][]byte, since map[string][][]byte) map[string][]byte {
	for a, vs := range since {
		synced[a] = vs[len(vs)-1]
	}
	return synced
}

func oneOf(got, synced []byte, since [][]byte) bool {
	for _, v := range append([][]byte{synced}, since...) {
		if bytes.Equal(got, v) && (got == nil) == (v == nil) {
			return true
		}
	}
	return false
}

// A slot changed behind the backend's back fails its checksum with a clear
// error.
func TestChangedSlotIsAnError(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	v := bytes.Repeat([]byte("v"), 1000)
	if err := b.Write(ctx, []backend.Item{{Addr: "x", Value: v}}); err != nil {
		t.Fatal(err)
	}
	f, err := vfs.Default.OpenReadWrite(classFile(dir, slotSize(len("x"), len(v))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tampered"), headerSize+10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := b.Read(ctx, []string{"x"}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading a changed slot: %v, want ErrCorrupt", err)
	}
}

// Rewriting the same addresses reuses their slots: the files do not grow
// with the number of writes. A replaced slot is free once a sync point
// covers its replacement: every so many writes here, or once enough
// replaced slots wait.
func TestSlotsAreReused(t *testing.T) {
	for _, tc := range []struct {
		noSync                   bool
		writes, syncEvery, limit int
	}{{false, 400, 50, 2*50*8 + 16}, {true, 3 * maxPending / 8, 0, 4*maxPending + 16}} {
		dir := t.TempDir()
		b, err := Open(dir, Options{NoSync: tc.noSync})
		if err != nil {
			t.Fatal(err)
		}
		for i := range tc.writes {
			items := make([]backend.Item, 8)
			for j := range items {
				items[j] = backend.Item{Addr: fmt.Sprint(j), Value: bytes.Repeat([]byte{byte(i)}, 1000)}
			}
			if err := b.Write(ctx, items); err != nil {
				t.Fatal(err)
			}
			if tc.syncEvery > 0 && i%tc.syncEvery == 0 {
				if err := b.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if c := b.cs.bySize[slotSize(1, 1000)]; c.next > uint32(tc.limit) {
			t.Errorf("NoSync=%v: %d slots handed out for 8 addresses, want at most %d", tc.noSync, c.next, tc.limit)
		}
		b.Close()
	}
}

// A Write acknowledged once durable that a crash cut off after some of
// its slots reached the disk is dropped whole at the next open.
func TestCutOffWriteDroppedWhole(t *testing.T) {
	c := newCrashable(t, Options{})
	small, big := bytes.Repeat([]byte("s"), 100), bytes.Repeat([]byte("b"), 5000)
	if err := c.b.Write(ctx, []backend.Item{{Addr: "x", Value: small}, {Addr: "y", Value: big}}); err != nil {
		t.Fatal(err)
	}
	items := []backend.Item{{Addr: "x", Value: bytes.Repeat([]byte("S"), 100)}, {Addr: "y", Value: bytes.Repeat([]byte("B"), 5000)}}
	gen := c.b.begin()
	changes, err := c.b.place(gen, 2|acked, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.b.finish(gen, changes)
	if err := c.b.cs.bySize[slotSize(1, 100)].file.SyncData(); err != nil { // x's slot reached the disk, y's did not
		t.Fatal(err)
	}
	c.crash()
	if got := c.read("x"); !bytes.Equal(got, small) {
		t.Fatalf("x holds %.8q after its Write was cut off, want %.8q", got, small)
	}
	if got := c.read("y"); !bytes.Equal(got, big) {
		t.Fatalf("y holds %.8q after its Write was cut off, want %.8q", got, big)
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("a second open of %s: %v, want it refused as locked", filepath.Base(dir), err)
	}
}

func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing"), Options{ReadOnly: true}); err == nil {
		t.Fatal("a missing store opened read-only")
	}
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := bytes.Repeat([]byte("v"), 1000)
	if err := b.Write(ctx, []backend.Item{{Addr: "x", Value: v}, {Addr: "small", Value: []byte("s")}}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	ro, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	got, err := ro.Read(ctx, []string{"x", "small"})
	if err != nil || !bytes.Equal(got[0], v) || string(got[1]) != "s" {
		t.Fatalf("read-only read: %.8q, %v", got, err)
	}
	if err := ro.Write(ctx, []backend.Item{{Addr: "x", Value: v}}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a write to a read-only store: %v, want ErrReadOnly", err)
	}
	if err := ro.Checkpoint(ctx, filepath.Join(dir, "copy")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a checkpoint of a read-only store: %v, want ErrReadOnly", err)
	}
}

// A checkpoint is the store as it stood when it was taken, whatever is
// written after, and opens as cleanly closed.
func TestCheckpoint(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(filepath.Join(dir, "store"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.DeferSync()
	r := rand.New(rand.NewPCG(5, 6))
	addrs := addresses(20)
	model := map[string][]byte{}
	do := func(version int) {
		o := randomOp(r, addrs, version)
		if o.items == nil {
			if err := b.Delete(ctx, []string{o.del}); err != nil {
				t.Fatal(err)
			}
			model[o.del] = nil
			return
		}
		if err := b.Write(ctx, o.items); err != nil {
			t.Fatal(err)
		}
		for _, it := range o.items {
			model[it.Addr] = it.Value
		}
	}
	for version := range 200 {
		do(version % 256)
	}
	copyDir := filepath.Join(dir, "copy")
	if err := b.Checkpoint(ctx, copyDir); err != nil {
		t.Fatal(err)
	}
	if err := b.Checkpoint(ctx, copyDir); err == nil {
		t.Fatal("a checkpoint over an existing directory succeeded")
	}
	want := maps.Clone(model)
	for version := range 100 {
		do(version % 256)
	}
	c, err := Open(copyDir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, a := range addrs {
		got, err := c.Read(ctx, []string{a})
		if err != nil || !bytes.Equal(got[0], want[a]) || (got[0] == nil) != (want[a] == nil) {
			t.Fatalf("the checkpoint's %s: %.12q, %v; want %.12q", a, got[0], err, want[a])
		}
	}
}

func TestMetrics(t *testing.T) {
	b, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	big := bytes.Repeat([]byte("b"), 1000)
	items := []backend.Item{{Addr: "a", Value: big}, {Addr: "b", Value: big}, {Addr: "tiny", Value: []byte("t")}}
	if err := b.Write(ctx, items); err != nil {
		t.Fatal(err)
	}
	b.DeferSync()
	if err := b.Write(ctx, items); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	m := b.Metrics()
	want := Metrics{Bytes: m.Bytes, SlotsUsed: 3, SlotsFree: 3, Syncs: 1}
	if m != want || m.Bytes < 4*1000 {
		t.Fatalf("metrics %+v, want %+v with at least 4,000 bytes", m, want)
	}
}

// A Sync covers a Write that returned even while a Write begun before it
// is still under way: it waits for that one to finish.
func TestSyncCoversWritesBehindOneUnderWay(t *testing.T) {
	c := newCrashable(t, Options{NoSync: true})
	slow := c.b.begin() // a Write under way, begun first
	if err := c.b.Write(ctx, []backend.Item{{Addr: "x", Value: []byte("returned")}}); err != nil {
		t.Fatal(err)
	}
	synced := make(chan error, 1)
	go func() { synced <- c.b.Sync(ctx) }()
	select {
	case err := <-synced:
		t.Fatalf("Sync returned (%v) while a Write begun before it was under way", err)
	case <-time.After(20 * time.Millisecond): // a Sync that does not wait returns meanwhile
	}
	c.b.finish(slow, nil)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	c.crash()
	if got := c.read("x"); string(got) != "returned" {
		t.Fatalf("after a Sync and a crash, x holds %q, want the Write that returned before the Sync", got)
	}
}
