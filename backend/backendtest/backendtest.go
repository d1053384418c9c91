// Package backendtest is the conformance suite every backend.Backend must
// pass. Each backend's own tests call Run with a function that opens a fresh,
// empty instance.
//
// It owns the precise meaning of the Backend contract: missing addresses read
// as nil while an empty value reads as a non-nil empty slice; addresses and
// values are binary-safe; the last item of a batch wins; a batch is atomic
// even under concurrent reads; Scan prefixes are literal bytes (no glob or
// pattern syntax leaks through); slices never alias the backend's storage;
// every method returns backend.ErrClosed after Close, and a second Close
// returns nil; a fenced write (WriteFenced, PipelineFenced) with a token
// below the one its key holds is refused with backend.ErrFenced and
// applies nothing of its batch, one with an equal or higher token applies
// all of it and the token, atomically even against concurrent fenced
// writers, and tokens are compared exactly over all 64 bits.
//
// It must never depend on a particular backend: it sees only the interface,
// so that mem, disk and redis are held to exactly the same rules.
package backendtest

import (
	"bytes"
	"context"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
)

// Open returns a fresh, empty backend for one test. It should register its
// own cleanup (t.Cleanup) to close the backend; closing twice is allowed.
type Open func(t *testing.T) backend.Backend

// Reopen returns a new backend over the same storage as old, which the suite
// has already closed. Backends that persist data provide one.
type Reopen func(t *testing.T, old backend.Backend) backend.Backend

// Option configures Run.
type Option func(*config)

type config struct{ reopen Reopen }

// WithReopen enables the persistence tests: data written before Close must
// read back after reopen.
func WithReopen(f Reopen) Option { return func(c *config) { c.reopen = f } }

// Run runs the conformance suite against the backends that open returns.
func Run(t *testing.T, open Open, opts ...Option) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Open)
	}{
		{"ReadMissing", testReadMissing},
		{"EmptyBatches", testEmptyBatches},
		{"WriteRead", testWriteRead},
		{"WriteThenReadInOneCall", testWriteThenRead},
		{"Pipeline", testPipeline},
		{"EmptyValue", testEmptyValue},
		{"Binary", testBinary},
		{"Overwrite", testOverwrite},
		{"BatchLastWins", testBatchLastWins},
		{"AtomicBatch", testAtomicBatch},
		{"DeleteMissing", testDeleteMissing},
		{"DeleteBatch", testDeleteBatch},
		{"Scan", testScan},
		{"ScanStops", testScanStops},
		{"CallerOwnsSlices", testCallerOwnsSlices},
		{"Concurrent", testConcurrent},
		{"LargeBatch", testLargeBatch},
		{"Closed", testClosed},
		{"Versioned", testVersioned},
		{"VersionedBatch", testVersionedBatch},
		{"VersionedConcurrent", testVersionedConcurrent},
		{"VersionedInvalid", testVersionedInvalid},
		{"Fenced", testFenced},
		{"FencedExact", testFencedExact},
		{"FencedKeysIndependent", testFencedKeysIndependent},
		{"FencedUnfenced", testFencedUnfenced},
		{"FencedInvalid", testFencedInvalid},
		{"FencedConcurrent", testFencedConcurrent},
		{"FencedPipeline", testFencedPipeline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
	if c.reopen != nil { // only persistent backends have a persistence test
		t.Run("Persistence", func(t *testing.T) { testPersistence(t, open, c.reopen) })
	}
}

// read reads addrs and fails the test on error or a wrong result length.
func read(t *testing.T, b backend.Backend, addrs ...string) [][]byte {
	t.Helper()
	vals, err := b.Read(context.Background(), addrs)
	if err != nil {
		t.Fatalf("Read(%q): %v", addrs, err)
	}
	if len(vals) != len(addrs) {
		t.Fatalf("Read(%d addresses) returned %d values", len(addrs), len(vals))
	}
	return vals
}

func write(t *testing.T, b backend.Backend, items ...backend.Item) {
	t.Helper()
	if err := b.Write(context.Background(), items); err != nil {
		t.Fatalf("Write(%d items): %v", len(items), err)
	}
}

func del(t *testing.T, b backend.Backend, addrs ...string) {
	t.Helper()
	if err := b.Delete(context.Background(), addrs); err != nil {
		t.Fatalf("Delete(%q): %v", addrs, err)
	}
}

// expect checks that addr reads back as want (nil means missing).
func expect(t *testing.T, b backend.Backend, addr string, want []byte) {
	t.Helper()
	checkValue(t, addr, read(t, b, addr)[0], want)
}

func checkValue(t *testing.T, addr string, got, want []byte) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Fatalf("%q: got %q, want missing (nil)", addr, got)
	case want != nil && got == nil:
		t.Fatalf("%q: got missing (nil), want %q", addr, want)
	case !bytes.Equal(got, want):
		t.Fatalf("%q: got %q, want %q", addr, got, want)
	}
}
