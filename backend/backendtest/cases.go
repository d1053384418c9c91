package backendtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
)

func testReadMissing(t *testing.T, open Open) {
	b := open(t)
	write(t, b, backend.Item{Addr: "present", Value: []byte("v")})
	vals := read(t, b, "missing", "present", "also-missing")
	checkValue(t, "missing", vals[0], nil)
	checkValue(t, "present", vals[1], []byte("v"))
	checkValue(t, "also-missing", vals[2], nil)
}

func testEmptyBatches(t *testing.T, open Open) {
	b := open(t)
	ctx := context.Background()
	if vals, err := b.Read(ctx, nil); err != nil || len(vals) != 0 {
		t.Fatalf("Read(nil) = %q, %v; want no values, nil", vals, err)
	}
	if err := b.Write(ctx, nil); err != nil {
		t.Fatalf("Write(nil) = %v", err)
	}
	if err := b.Delete(ctx, []string{}); err != nil {
		t.Fatalf("Delete(empty) = %v", err)
	}
}

func testWriteRead(t *testing.T, open Open) {
	b := open(t)
	items := []backend.Item{
		{Addr: "a", Value: []byte("alpha")},
		{Addr: "b", Value: bytes.Repeat([]byte("β"), 100)},
		{Addr: "c", Value: []byte{0}},
	}
	write(t, b, items...)
	vals := read(t, b, "c", "a", "b") // order of the request, not of storage
	for i, want := range []backend.Item{items[2], items[0], items[1]} {
		checkValue(t, want.Addr, vals[i], want.Value)
	}
}

// testWriteThenRead: backend.Pipeline with one address list applies its
// Write before its Read, whether the backend does both in one round trip
// or not.
func testWriteThenRead(t *testing.T, open Open) {
	b := open(t)
	write(t, b, item("a", "old"), item("b", "old"))
	lists, err := backend.Pipeline(t.Context(), b, []backend.Item{item("a", "new"), item("c", "new")}, [][]string{{"c", "b", "a", "d"}})
	if err != nil {
		t.Fatal(err)
	}
	vals := lists[0]
	checkValue(t, "c", vals[0], []byte("new"))
	checkValue(t, "b", vals[1], []byte("old"))
	checkValue(t, "a", vals[2], []byte("new"))
	if vals[3] != nil {
		t.Fatalf("missing address read %q", vals[3])
	}
}

// testPipeline: backend.Pipeline applies its Write before its Reads and
// answers each Read in order, with or without a Write, whether the
// backend does them in one round trip or not.
func testPipeline(t *testing.T, open Open) {
	b := open(t)
	write(t, b, item("a", "old"), item("b", "old"))
	vals, err := backend.Pipeline(t.Context(), b, []backend.Item{item("a", "new")}, [][]string{{"b", "a"}, {"d", "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 2 || len(vals[0]) != 2 || len(vals[1]) != 2 {
		t.Fatalf("Pipeline returned %d lists; want 2 of 2 values", len(vals))
	}
	checkValue(t, "b", vals[0][0], []byte("old"))
	checkValue(t, "a", vals[0][1], []byte("new"))
	checkValue(t, "a", vals[1][1], []byte("new"))
	if vals[1][0] != nil {
		t.Fatalf("missing address read %q", vals[1][0])
	}
	vals, err = backend.Pipeline(t.Context(), b, nil, [][]string{{"a"}, {"b"}})
	if err != nil || string(vals[0][0]) != "new" || string(vals[1][0]) != "old" {
		t.Fatalf("Pipeline without a Write = %q, %v", vals, err)
	}
}

// testEmptyValue pins the one subtle distinction of the contract: an empty
// value (written as []byte{} or nil) is present and reads back as a non-nil
// empty slice, while a missing address reads back as nil.
func testEmptyValue(t *testing.T, open Open) {
	b := open(t)
	write(t, b, backend.Item{Addr: "empty", Value: []byte{}}, backend.Item{Addr: "nil", Value: nil})
	vals := read(t, b, "empty", "nil", "missing")
	checkValue(t, "empty", vals[0], []byte{})
	checkValue(t, "nil", vals[1], []byte{})
	checkValue(t, "missing", vals[2], nil)
	if n := len(scanAll(t, b, "")); n != 2 {
		t.Fatalf("Scan found %d addresses, want the 2 empty values", n)
	}
}

func testBinary(t *testing.T, open Open) {
	b := open(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	items := []backend.Item{{Addr: string(all), Value: all}}
	for i := range 256 {
		addr := string([]byte{byte(i), 0, 0xff, '*', byte(255 - i)})
		items = append(items, backend.Item{Addr: addr, Value: append([]byte{byte(i)}, all[i:]...)})
	}
	write(t, b, items...)
	addrs := make([]string, len(items))
	for i, it := range items {
		addrs[i] = it.Addr
	}
	for i, v := range read(t, b, addrs...) {
		checkValue(t, addrs[i], v, items[i].Value)
	}
	if got := scanAll(t, b, ""); len(got) != len(items) {
		t.Fatalf("Scan found %d binary addresses, want %d", len(got), len(items))
	}
}

func testOverwrite(t *testing.T, open Open) {
	b := open(t)
	write(t, b, backend.Item{Addr: "k", Value: []byte("a long first value")})
	write(t, b, backend.Item{Addr: "k", Value: []byte("short")})
	expect(t, b, "k", []byte("short"))
}

func testBatchLastWins(t *testing.T, open Open) {
	b := open(t)
	write(t, b,
		backend.Item{Addr: "k", Value: []byte("first")},
		backend.Item{Addr: "other", Value: []byte("x")},
		backend.Item{Addr: "k", Value: []byte("second")},
		backend.Item{Addr: "k", Value: []byte("third")},
	)
	expect(t, b, "k", []byte("third"))
}

func testDeleteMissing(t *testing.T, open Open) {
	b := open(t)
	del(t, b, "never-written", "nor-this")
	write(t, b, backend.Item{Addr: "k", Value: []byte("v")})
	del(t, b, "k")
	del(t, b, "k") // already gone
	expect(t, b, "k", nil)
}

func testDeleteBatch(t *testing.T, open Open) {
	b := open(t)
	write(t, b, item("a", "1"), item("b", "2"), item("c", "3"))
	del(t, b, "a", "missing", "b")
	vals := read(t, b, "a", "b", "c")
	checkValue(t, "a", vals[0], nil)
	checkValue(t, "b", vals[1], nil)
	checkValue(t, "c", vals[2], []byte("3"))
	if got := scanAll(t, b, ""); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("Scan after Delete = %q, want [c]", got)
	}
}

func item(addr, value string) backend.Item {
	return backend.Item{Addr: addr, Value: []byte(value)}
}

// scanAll returns the addresses Scan reports for prefix, sorted, and fails
// the test if one is reported twice or lacks the prefix.
func scanAll(t *testing.T, b backend.Backend, prefix string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := b.Scan(context.Background(), prefix, func(addr string) error {
		if seen[addr] {
			return fmt.Errorf("address %q reported twice", addr)
		}
		seen[addr] = true
		return nil
	})
	if err != nil {
		t.Fatalf("Scan(%q): %v", prefix, err)
	}
	var out []string
	for a := range seen {
		if len(a) < len(prefix) || a[:len(prefix)] != prefix {
			t.Fatalf("Scan(%q) reported %q, which lacks the prefix", prefix, a)
		}
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

func testScan(t *testing.T, open Open) {
	b := open(t)
	addrs := []string{
		"a", "a*", "a*[", "a*[x", "a*[]", "a*[\\", "a*x", "a?[", "ab", "a[",
		"a\\*[", "b", "ba*[", "\xff", "\xff\xff", "\xff\xff\x00", "\xfe\xff",
	}
	for _, a := range addrs {
		write(t, b, item(a, "v:"+a))
	}
	cases := map[string][]string{
		"":         addrs,
		"a*[":      {"a*[", "a*[x", "a*[]", "a*[\\"},
		"a*":       {"a*", "a*[", "a*[x", "a*[]", "a*[\\", "a*x"},
		"a?":       {"a?["},
		"a\\":      {"a\\*["},
		"a[":       {"a["},
		"b":        {"b", "ba*["},
		"\xff":     {"\xff", "\xff\xff", "\xff\xff\x00"},
		"\xff\xff": {"\xff\xff", "\xff\xff\x00"},
		"\xfe":     {"\xfe\xff"},
		"c":        nil,
		"a*[x-":    nil,
	}
	for prefix, want := range cases {
		want = slices.Sorted(slices.Values(want))
		if got := scanAll(t, b, prefix); !slices.Equal(got, want) {
			t.Errorf("Scan(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func testScanStops(t *testing.T, open Open) {
	b := open(t)
	write(t, b, item("p1", "x"), item("p2", "x"), item("p3", "x"))
	stop := errors.New("stop here")
	calls := 0
	err := b.Scan(context.Background(), "p", func(string) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("Scan with failing fn: err %v after %d calls, want %v after 1", err, calls, stop)
	}
}

func testCallerOwnsSlices(t *testing.T, open Open) {
	b := open(t)
	v := []byte("original")
	write(t, b, backend.Item{Addr: "k", Value: v})
	copy(v, "MUTATED!") // the caller reuses its buffer after Write
	got := read(t, b, "k")[0]
	checkValue(t, "k", got, []byte("original"))
	copy(got, "MUTATED!") // the caller scribbles over what Read returned
	expect(t, b, "k", []byte("original"))
}

// testConcurrent runs 16 goroutines, each writing, reading and deleting its
// own addresses, so every result is predictable.
func testConcurrent(t *testing.T, open Open) {
	b := open(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() { errs <- worker(b, g) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(scanAll(t, b, "")); n != 16*4 {
		t.Fatalf("after concurrent use Scan found %d addresses, want %d", n, 16*4)
	}
}

func worker(b backend.Backend, g int) error {
	ctx := context.Background()
	for round := range 20 {
		var items []backend.Item
		var addrs []string
		for i := range 5 {
			a := fmt.Sprintf("g%02d/%d", g, i)
			items = append(items, item(a, fmt.Sprintf("%d/%d", g, round)))
			addrs = append(addrs, a)
		}
		if err := b.Write(ctx, items); err != nil {
			return err
		}
		vals, err := b.Read(ctx, addrs)
		if err != nil {
			return err
		}
		for i, v := range vals {
			if string(v) != string(items[i].Value) {
				return fmt.Errorf("goroutine %d round %d: %s = %q, want %q", g, round, addrs[i], v, items[i].Value)
			}
		}
		if err := b.Delete(ctx, addrs[4:]); err != nil {
			return err
		}
	}
	return nil
}

// testAtomicBatch writes batches in which every item carries the same
// version and checks that concurrent readers always see one version across
// all addresses: a half-applied batch would show two.
func testAtomicBatch(t *testing.T, open Open) {
	b := open(t)
	const width, rounds, readers = 32, 150, 4
	addrs := make([]string, width)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("atomic/%02d", i)
	}
	write(t, b, versionBatch(addrs, 0)...)
	done := make(chan struct{})
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() { errs <- readVersions(b, addrs, done) })
	}
	for v := uint64(1); v <= rounds; v++ {
		write(t, b, versionBatch(addrs, v)...)
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func versionBatch(addrs []string, version uint64) []backend.Item {
	items := make([]backend.Item, len(addrs))
	for i, a := range addrs {
		v := make([]byte, 64) // pad so values are not trivially small
		binary.BigEndian.PutUint64(v, version)
		items[i] = backend.Item{Addr: a, Value: v}
	}
	return items
}

// readVersions reads all addrs until done and reports the first read that
// mixes versions. It reads at least once even if done is already closed.
func readVersions(b backend.Backend, addrs []string, done <-chan struct{}) error {
	for n := 0; ; n++ {
		vals, err := b.Read(context.Background(), addrs)
		if err != nil {
			return err
		}
		if err := sameVersion(addrs, vals); err != nil {
			return fmt.Errorf("read %d saw a partial batch: %w", n, err)
		}
		select {
		case <-done:
			return nil
		default:
		}
	}
}

func sameVersion(addrs []string, vals [][]byte) error {
	for i, v := range vals {
		if len(v) != 64 {
			return fmt.Errorf("%s has %d bytes, want 64", addrs[i], len(v))
		}
		if !bytes.Equal(v[:8], vals[0][:8]) {
			return fmt.Errorf("%s has version %d but %s has %d", addrs[i],
				binary.BigEndian.Uint64(v), addrs[0], binary.BigEndian.Uint64(vals[0]))
		}
	}
	return nil
}

func testLargeBatch(t *testing.T, open Open) {
	b := open(t)
	const n, size = 5000, 1024
	items := make([]backend.Item, n)
	addrs := make([]string, n)
	for i := range items {
		addrs[i] = fmt.Sprintf("large/%05d", i)
		v := bytes.Repeat([]byte{byte(i)}, size)
		binary.BigEndian.PutUint32(v, uint32(i))
		items[i] = backend.Item{Addr: addrs[i], Value: v}
	}
	write(t, b, items...)
	for i, v := range read(t, b, addrs...) {
		if !bytes.Equal(v, items[i].Value) {
			t.Fatalf("%s: got %d bytes, not the %d written", addrs[i], len(v), size)
		}
	}
	if got := len(scanAll(t, b, "large/")); got != n {
		t.Fatalf("Scan found %d of %d addresses", got, n)
	}
	del(t, b, addrs...)
	for i, v := range read(t, b, addrs...) {
		checkValue(t, addrs[i], v, nil)
	}
}

func testClosed(t *testing.T, open Open) {
	b := open(t)
	write(t, b, item("k", "v"))
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := context.Background()
	_, errRead := b.Read(ctx, []string{"k"})
	_, errVersioned := b.WriteVersioned(ctx, []backend.VersionedItem{{Addr: "k", Version: 1}})
	calls := map[string]error{
		"Read":           errRead,
		"Write":          b.Write(ctx, []backend.Item{item("k", "w")}),
		"WriteVersioned": errVersioned,
		"WriteFenced":    b.WriteFenced(ctx, backend.Fence{Key: "f", Token: 1}, []backend.Item{item("k", "w")}),
		"Delete":         b.Delete(ctx, []string{"k"}),
		"Scan":           b.Scan(ctx, "", func(string) error { return nil }),
	}
	for name, err := range calls {
		if !errors.Is(err, backend.ErrClosed) {
			t.Errorf("%s after Close = %v, want backend.ErrClosed", name, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func testPersistence(t *testing.T, open Open, reopen Reopen) {
	b := open(t)
	write(t, b, item("kept", "value"), item("gone", "x"), item("empty", ""))
	del(t, b, "gone")
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	b = reopen(t, b)
	vals := read(t, b, "kept", "gone", "empty")
	checkValue(t, "kept", vals[0], []byte("value"))
	checkValue(t, "gone", vals[1], nil)
	checkValue(t, "empty", vals[2], []byte{})
	if got := scanAll(t, b, ""); !slices.Equal(got, []string{"empty", "kept"}) {
		t.Fatalf("Scan after reopen = %q, want [empty kept]", got)
	}
	// A fence's token survives a reopen: an older writer stays fenced out.
	fence := backend.Fence{Key: "fence", Token: 9}
	writeFenced(t, b, fence, item("kept", "fenced"))
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	b = reopen(t, b)
	expectRefused(t, b, backend.Fence{Key: "fence", Token: 8}, item("kept", "older"))
	expect(t, b, "kept", []byte("fenced"))
}
