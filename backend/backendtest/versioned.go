package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
)

func vitem(addr string, version uint64, value string) backend.VersionedItem {
	return backend.VersionedItem{Addr: addr, Version: version, Value: []byte(value)}
}

// readVersioned reads one versioned address and splits it.
func readVersioned(t *testing.T, b backend.Backend, addr string) (uint64, string) {
	t.Helper()
	vals := read(t, b, addr)
	v, val, err := backend.SplitVersioned(vals[0])
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return v, string(val)
}

func writeVersioned(t *testing.T, b backend.Backend, items ...backend.VersionedItem) int {
	t.Helper()
	stale, err := b.WriteVersioned(context.Background(), items)
	if err != nil {
		t.Fatalf("WriteVersioned: %v", err)
	}
	return stale
}

// testVersioned: a newer version replaces the stored one; an equal or older
// one is skipped and counted as stale; a missing address takes any version.
func testVersioned(t *testing.T, open Open) {
	b := open(t)
	if stale := writeVersioned(t, b, vitem("v", 5, "five")); stale != 0 {
		t.Fatalf("first write to a missing address counted %d stale", stale)
	}
	if stale := writeVersioned(t, b, vitem("v", 3, "three"), vitem("w", 1, "one")); stale != 1 {
		t.Fatalf("older version: %d stale, want 1", stale)
	}
	if v, val := readVersioned(t, b, "v"); v != 5 || val != "five" {
		t.Fatalf("after a stale write v = (%d, %q); want (5, five)", v, val)
	}
	if v, val := readVersioned(t, b, "w"); v != 1 || val != "one" {
		t.Fatalf("the fresh item of a batch with a stale one: w = (%d, %q); want (1, one)", v, val)
	}
	if stale := writeVersioned(t, b, vitem("v", 5, "again")); stale != 1 {
		t.Fatalf("equal version: %d stale, want 1", stale)
	}
	writeVersioned(t, b, vitem("v", 1<<40+7, "big"))
	if v, val := readVersioned(t, b, "v"); v != 1<<40+7 || val != "big" {
		t.Fatalf("newer version: v = (%d, %q); want (%d, big)", v, val, uint64(1<<40+7))
	}
}

// testVersionedBatch: later items of one batch see earlier ones.
func testVersionedBatch(t *testing.T, open Open) {
	b := open(t)
	stale := writeVersioned(t, b, vitem("a", 2, "two"), vitem("a", 1, "one"), vitem("a", 3, "three"), vitem("a", 3, "dup"))
	if stale != 2 {
		t.Fatalf("batch 2,1,3,3 on one address: %d stale, want 2", stale)
	}
	if v, val := readVersioned(t, b, "a"); v != 3 || val != "three" {
		t.Fatalf("a = (%d, %q); want (3, three)", v, val)
	}
}

// testVersionedConcurrent: writers racing with shuffled versions leave the
// newest version at every address, whatever order they arrive in.
func testVersionedConcurrent(t *testing.T, open Open) {
	b := open(t)
	const writers, addrs = 8, 16
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for round := range 20 {
				version := uint64(round*writers + (w*7)%writers + 1) // distinct across writers
				batch := make([]backend.VersionedItem, addrs)
				for i := range batch {
					batch[i] = vitem(fmt.Sprintf("c%d", i), version, fmt.Sprint(version))
				}
				if _, err := b.WriteVersioned(context.Background(), batch); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := uint64(20 * writers)
	for i := range addrs {
		v, val := readVersioned(t, b, fmt.Sprintf("c%d", i))
		if v != want || val != fmt.Sprint(want) {
			t.Fatalf("c%d = (%d, %q); want the newest (%d)", i, v, val, want)
		}
	}
}

// testVersionedInvalid: version 0 and versions beyond 2^53 are refused
// without writing anything.
func testVersionedInvalid(t *testing.T, open Open) {
	b := open(t)
	for _, v := range []uint64{0, backend.MaxVersion + 1} {
		if _, err := b.WriteVersioned(context.Background(), []backend.VersionedItem{vitem("ok", 1, "x"), vitem("bad", v, "x")}); err == nil {
			t.Fatalf("version %d accepted", v)
		}
	}
	if vals := read(t, b, "ok", "bad"); vals[0] != nil || vals[1] != nil {
		t.Fatalf("a refused versioned batch wrote %q", vals)
	}
	if !bytes.Equal(backend.EncodeVersioned(1, nil)[:backend.VersionSize], []byte{0, 0, 0, 0, 0, 0, 0, 1}) {
		t.Fatal("versions are not stored big-endian")
	}
}
