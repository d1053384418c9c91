package kvtest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
)

// The contract of kv.Update and kv.SetIfNoneExist, which Redis's string
// commands are built on.

func update(t *testing.T, s kv.Store, key string, m kv.Mutation) kv.Result {
	t.Helper()
	r, err := kv.Update(t.Context(), s, key, m)
	if err != nil {
		t.Fatalf("Update(%q, op %d, %q): %v", key, m.Op, m.Arg, err)
	}
	return r
}

func incr(delta int) kv.Mutation {
	return kv.Mutation{Op: kv.MutIncrBy, Arg: []byte(strconv.Itoa(delta))}
}

// testMutations runs each kind of mutation on a missing and on an
// existing key and checks its Result and the value it leaves.
func testMutations(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	if r := update(t, s, "n", incr(5)); r.Found || !r.Exists || string(r.New) != "5" {
		t.Errorf("IncrBy 5 of a missing key = %+v; want not found, exists, New 5", r)
	}
	if r := update(t, s, "n", incr(-7)); !r.Found || string(r.New) != "-2" {
		t.Errorf("IncrBy -7 of 5 = %+v; want found, New -2", r)
	}
	f := kv.Mutation{Op: kv.MutIncrByFloat, Arg: []byte("0.5")}
	if r := update(t, s, "n", f); string(r.New) != "-1.5" {
		t.Errorf("IncrByFloat 0.5 of -2 = %q; want -1.5", r.New)
	}
	app := kv.Mutation{Op: kv.MutAppend, Arg: []byte("xy")}
	if r := update(t, s, "s", app); r.Found || r.Len != 2 {
		t.Errorf("Append to a missing key = %+v; want not found, Len 2", r)
	}
	if r := update(t, s, "s", app); r.Len != 4 {
		t.Errorf("Append again: Len %d; want 4", r.Len)
	}
	wantValue(t, s, "s", []byte("xyxy"))
	testConditionalSets(t, s)
	del := kv.Mutation{Op: kv.MutDelete, ReturnOld: true}
	if r := update(t, s, "s", del); !r.Found || string(r.Old) != "xyxy" || r.Exists {
		t.Errorf("Delete returning the old value = %+v; want found, old xyxy, gone", r)
	}
	if r := update(t, s, "s", del); r.Found || r.Old != nil || r.Written {
		t.Errorf("Delete of a missing key = %+v; want nothing found or written", r)
	}
	wantMissing(t, s, "s")
	if r := update(t, s, "n", kv.Mutation{Op: kv.MutRead}); !r.Found || string(r.Old) != "-1.5" || r.Written {
		t.Errorf("Read = %+v; want found -1.5, not written", r)
	}
	wantKeys(t, s, 1)
}

func testConditionalSets(t *testing.T, s kv.Store) {
	t.Helper()
	nx := kv.Mutation{Op: kv.MutSet, Arg: []byte("first"), If: kv.IfMissing, ReturnOld: true}
	if r := update(t, s, "c", nx); r.Found || !r.Written || r.Old != nil {
		t.Errorf("Set if missing, of a missing key = %+v; want written, no old value", r)
	}
	nx.Arg = []byte("second")
	if r := update(t, s, "c", nx); !r.Found || r.Written || string(r.Old) != "first" {
		t.Errorf("Set if missing, of an existing key = %+v; want not written, old first", r)
	}
	xx := kv.Mutation{Op: kv.MutSet, Arg: []byte("third"), If: kv.IfExists}
	if r := update(t, s, "c", xx); !r.Written {
		t.Errorf("Set if exists, of an existing key = %+v; want written", r)
	}
	if r := update(t, s, "never", xx); r.Written || r.Exists {
		t.Errorf("Set if exists, of a missing key = %+v; want nothing written", r)
	}
	wantValue(t, s, "c", []byte("third"))
	wantMissing(t, s, "never")
	mustDelete(t, s, "c")
}

// testMutationErrors checks that a mutation that does not apply fails
// with its error and leaves the key as it was.
func testMutationErrors(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	ctx := t.Context()
	mustPut(t, s, "text", []byte("abc"))
	_, err := kv.Update(ctx, s, "text", incr(1))
	wantErr(t, "IncrBy of a non-integer", err, kv.ErrNotInteger)
	_, err = kv.Update(ctx, s, "text", kv.Mutation{Op: kv.MutIncrByFloat, Arg: []byte("1")})
	wantErr(t, "IncrByFloat of a non-number", err, kv.ErrNotFloat)
	wantValue(t, s, "text", []byte("abc"))
	mustPut(t, s, "big", []byte(strconv.FormatInt(1<<62, 10)))
	_, err = kv.Update(ctx, s, "big", kv.Mutation{Op: kv.MutIncrBy, Arg: []byte(strconv.FormatInt(1<<62, 10))})
	wantErr(t, "IncrBy past the largest int64", err, kv.ErrOverflow)
	wantValue(t, s, "big", []byte(strconv.FormatInt(1<<62, 10)))
	long := kv.Mutation{Op: kv.MutAppend, Arg: bytes.Repeat([]byte("z"), h.cfg.ValueSize)}
	_, err = kv.Update(ctx, s, "text", long)
	wantErr(t, "Append past the value size", err, kv.ErrValueTooLarge)
	wantValue(t, s, "text", []byte("abc"))
	_, err = kv.Update(ctx, s, "fresh", incr(1))
	if err != nil {
		t.Fatalf("IncrBy after failed mutations: %v", err)
	}
	wantValue(t, s, "fresh", []byte("1"))
	wantKeys(t, s, 3)
}

// testMutationsFull checks that a mutation making a key in a full store
// fails with kv.ErrFull, and one of an existing key still works.
func testMutationsFull(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	for i := range h.cfg.Capacity {
		mustPut(t, s, capKey(i), []byte("0"))
	}
	_, err := kv.Update(t.Context(), s, "new", incr(1))
	wantErr(t, "IncrBy of a new key in a full store", err, kv.ErrFull)
	wantMissing(t, s, "new")
	if r := update(t, s, capKey(3), incr(2)); string(r.New) != "2" {
		t.Errorf("IncrBy of an existing key in a full store: New %q; want 2", r.New)
	}
	ok, err := kv.SetIfNoneExist(t.Context(), s, []kv.Pair{{Key: "new", Value: []byte("v")}})
	wantErr(t, "SetIfNoneExist of a new key in a full store", err, kv.ErrFull)
	if ok {
		t.Error("SetIfNoneExist into a full store reported it set its pairs")
	}
	wantMissing(t, s, "new")
	wantKeys(t, s, h.cfg.Capacity)
}

// testMutationsConcurrent has goroutines increment and append to the same
// keys at once: no increment and no append is lost.
func testMutationsConcurrent(t *testing.T, h *harness) {
	const goroutines = 16
	rounds := max(1, min(8, h.cfg.ValueSize/goroutines)) // the appends fit a value
	s := h.mustOpen(nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range rounds {
				for _, m := range []kv.Mutation{incr(1), {Op: kv.MutAppend, Arg: []byte{'a' + byte(g)}}} {
					if _, err := kv.Update(ctx, s, fmt.Sprint("hot", m.Op), m); err != nil {
						t.Errorf("Update: %v", err)
						cancel()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	wantValue(t, s, fmt.Sprint("hot", kv.MutIncrBy), []byte(strconv.Itoa(goroutines*rounds)))
	got, _, err := s.Get(ctx, fmt.Sprint("hot", kv.MutAppend))
	if err != nil || len(got) != goroutines*rounds {
		t.Errorf("appended value: %d bytes, %v; want %d", len(got), err, goroutines*rounds)
	}
}

// testSetIfNoneExist checks MSETNX's all-or-nothing rule.
func testSetIfNoneExist(t *testing.T, h *harness) {
	s := h.mustOpen(nil)
	pairs := []kv.Pair{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}
	if ok, err := kv.SetIfNoneExist(t.Context(), s, pairs); !ok || err != nil {
		t.Fatalf("SetIfNoneExist of missing keys = %v, %v; want true", ok, err)
	}
	wantValue(t, s, "b", []byte("2"))
	more := []kv.Pair{{Key: "c", Value: []byte("3")}, {Key: "a", Value: []byte("9")}}
	if ok, err := kv.SetIfNoneExist(t.Context(), s, more); ok || err != nil {
		t.Fatalf("SetIfNoneExist with one existing key = %v, %v; want false", ok, err)
	}
	wantMissing(t, s, "c")
	wantValue(t, s, "a", []byte("1"))
	wantKeys(t, s, 2)
}
