package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
)

func writeFenced(t *testing.T, b backend.Backend, f backend.Fence, items ...backend.Item) {
	t.Helper()
	if err := b.WriteFenced(context.Background(), f, items); err != nil {
		t.Fatalf("WriteFenced(%+v, %d items): %v", f, len(items), err)
	}
}

// expectRefused checks that a fenced write of items is refused as fenced
// out.
func expectRefused(t *testing.T, b backend.Backend, f backend.Fence, items ...backend.Item) {
	t.Helper()
	if err := b.WriteFenced(context.Background(), f, items); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("WriteFenced(%+v) = %v, want backend.ErrFenced", f, err)
	}
}

// expectToken checks the token stored at a fence's key.
func expectToken(t *testing.T, b backend.Backend, key string, want uint64) {
	t.Helper()
	expect(t, b, key, backend.EncodeToken(want))
}

// testFenced: a fenced write stores its batch and its token; an older
// token (a driver a newer one replaced, writing late) is refused and
// applies nothing of its batch; an equal token (a retried write) and a
// newer one are applied.
func testFenced(t *testing.T, open Open) {
	b := open(t)
	write(t, b, item("old", "plain"))
	writeFenced(t, b, backend.Fence{Key: "fence/m", Token: 5}, item("a", "five"), item("b", "five"))
	expectToken(t, b, "fence/m", 5)
	expectRefused(t, b, backend.Fence{Key: "fence/m", Token: 4}, item("a", "four"), item("c", "four"), item("old", "four"))
	expect(t, b, "a", []byte("five"))
	expect(t, b, "c", nil)
	expect(t, b, "old", []byte("plain"))
	expectToken(t, b, "fence/m", 5)

	writeFenced(t, b, backend.Fence{Key: "fence/m", Token: 5}, item("a", "again"), item("a", "last wins"))
	expect(t, b, "a", []byte("last wins"))
	writeFenced(t, b, backend.Fence{Key: "fence/m", Token: 6}, item("b", "six"))
	expect(t, b, "b", []byte("six"))
	expectToken(t, b, "fence/m", 6)
	// The driver of token 5 writes again after 6 took over, as a deposed
	// driver's late write does once it has written before (a backend may
	// keep what it learned of the fence from 5's last write).
	expectRefused(t, b, backend.Fence{Key: "fence/m", Token: 5}, item("a", "late"), item("c", "late"))
	expect(t, b, "a", []byte("last wins"))
	expect(t, b, "c", nil)
	writeFenced(t, b, backend.Fence{Key: "fence/m", Token: 7}) // no items: the token alone
	expectToken(t, b, "fence/m", 7)
	expectRefused(t, b, backend.Fence{Key: "fence/m", Token: 6})
}

// testFencedExact: tokens are compared over all 64 bits, not as floating
// point numbers (2^60 and 2^60+1 are one double), nor as signed ones.
func testFencedExact(t *testing.T, open Open) {
	b := open(t)
	for _, c := range []struct{ newer, older uint64 }{
		{1<<60 + 1, 1 << 60},
		{1<<63 + 1, 1 << 63},
		{1 << 63, 1<<63 - 1},
		{1<<64 - 1, 1<<64 - 2},
		{256, 255},
	} {
		key := fmt.Sprint("fence/", c.newer)
		writeFenced(t, b, backend.Fence{Key: key, Token: c.newer}, item("x", "newer"))
		expectRefused(t, b, backend.Fence{Key: key, Token: c.older}, item("x", "older"))
		expect(t, b, "x", []byte("newer"))
		expectToken(t, b, key, c.newer)
	}
}

// testFencedKeysIndependent: a token only fences writes with its key.
func testFencedKeysIndependent(t *testing.T, open Open) {
	b := open(t)
	writeFenced(t, b, backend.Fence{Key: "fence/a", Token: 10}, item("x", "a"))
	writeFenced(t, b, backend.Fence{Key: "fence/b", Token: 1}, item("y", "b"))
	expectRefused(t, b, backend.Fence{Key: "fence/a", Token: 1}, item("x", "late"))
	expect(t, b, "x", []byte("a"))
	expect(t, b, "y", []byte("b"))
	expectToken(t, b, "fence/a", 10)
	expectToken(t, b, "fence/b", 1)
}

// testFencedUnfenced: the zero Fence makes a plain Write, which stores no
// token anywhere.
func testFencedUnfenced(t *testing.T, open Open) {
	b := open(t)
	writeFenced(t, b, backend.Fence{}, item("x", "plain"))
	expect(t, b, "x", []byte("plain"))
	if got := scanAll(t, b, ""); len(got) != 1 {
		t.Fatalf("an unfenced WriteFenced stored %q, want only x", got)
	}
}

// testFencedInvalid: a fence with a token but no key, and a batch that
// writes its own fence's key, are errors that store nothing.
func testFencedInvalid(t *testing.T, open Open) {
	b := open(t)
	ctx := context.Background()
	if err := b.WriteFenced(ctx, backend.Fence{Token: 1}, []backend.Item{item("x", "v")}); err == nil {
		t.Fatal("a fence without a key was accepted")
	}
	if err := b.WriteFenced(ctx, backend.Fence{Key: "f", Token: 1}, []backend.Item{item("x", "v"), item("f", "v")}); err == nil {
		t.Fatal("a batch writing its own fence's key was accepted")
	}
	if _, err := backend.PipelineFenced(ctx, b, backend.Fence{Token: 1}, []backend.Item{item("x", "v")}, nil); err == nil {
		t.Fatal("a pipeline with a fence without a key was accepted")
	}
	if got := scanAll(t, b, ""); len(got) != 0 {
		t.Fatalf("refused fenced writes stored %q", got)
	}
}

// testFencedConcurrent: drivers racing with distinct tokens leave exactly
// the batch of the highest token, never a mix; every refusal is
// ErrFenced.
func testFencedConcurrent(t *testing.T, open Open) {
	b := open(t)
	const writers, rounds, addrs = 8, 20, 16
	fence := func(token uint64) backend.Fence { return backend.Fence{Key: "fence/race", Token: token} }
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for round := range rounds {
				token := uint64(round*writers + (w*5)%writers + 1) // distinct across writers
				batch := make([]backend.Item, addrs)
				for i := range batch {
					batch[i] = item(fmt.Sprintf("r%d", i), fmt.Sprint(token))
				}
				if err := b.WriteFenced(context.Background(), fence(token), batch); err != nil && !errors.Is(err, backend.ErrFenced) {
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
	highest := uint64(rounds * writers)
	expectToken(t, b, "fence/race", highest)
	for i := range addrs {
		expect(t, b, fmt.Sprintf("r%d", i), []byte(fmt.Sprint(highest)))
	}
}

// testFencedPipeline: a fenced pipeline applies its write before its
// reads; a refused one applies nothing and returns no values.
func testFencedPipeline(t *testing.T, open Open) {
	b := open(t)
	ctx := context.Background()
	vals, err := backend.PipelineFenced(ctx, b, backend.Fence{Key: "fence/p", Token: 3},
		[]backend.Item{item("a", "three")}, [][]string{{"a", "missing"}, {"fence/p"}})
	if err != nil {
		t.Fatalf("PipelineFenced: %v", err)
	}
	if len(vals) != 2 || len(vals[0]) != 2 || len(vals[1]) != 1 {
		t.Fatalf("PipelineFenced returned %q, want 2 and 1 values", vals)
	}
	checkValue(t, "a", vals[0][0], []byte("three"))
	checkValue(t, "missing", vals[0][1], nil)
	checkValue(t, "fence/p", vals[1][0], backend.EncodeToken(3))

	vals, err = backend.PipelineFenced(ctx, b, backend.Fence{Key: "fence/p", Token: 2},
		[]backend.Item{item("a", "two"), item("n", "two")}, [][]string{{"a"}})
	if !errors.Is(err, backend.ErrFenced) || vals != nil {
		t.Fatalf("PipelineFenced with an older token = %q, %v; want no values and backend.ErrFenced", vals, err)
	}
	expect(t, b, "a", []byte("three"))
	expect(t, b, "n", nil)

	vals, err = backend.PipelineFenced(ctx, b, backend.Fence{Key: "fence/p", Token: 3}, nil, [][]string{{"a"}})
	if err != nil || len(vals) != 1 {
		t.Fatalf("PipelineFenced with the same token and no items = %q, %v", vals, err)
	}
	checkValue(t, "a", vals[0][0], []byte("three"))
}
