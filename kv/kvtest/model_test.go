package kvtest

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

// Hand-written histories pin down the model and the narrowing of failed
// Puts, independently of any scheduling.
func TestModelHistories(t *testing.T) {
	put := func(v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: linInput{Op: opPut, Key: "k", Value: v}, Output: linOutput{}, Call: call, Return: ret}
	}
	failedPut := func(v string, call int64) porcupine.Operation {
		return porcupine.Operation{Input: linInput{Op: opPut, Key: "k", Value: v}, Output: linOutput{Failed: true}, Call: call, Return: math.MaxInt64}
	}
	get := func(v string, exists bool, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: linInput{Op: opGet, Key: "k"}, Output: linOutput{Value: v, Exists: exists}, Call: call, Return: ret}
	}
	del := func(call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: linInput{Op: opDelete, Key: "k"}, Output: linOutput{}, Call: call, Return: ret}
	}
	failedDel := func(call int64) porcupine.Operation {
		return porcupine.Operation{Input: linInput{Op: opDelete, Key: "k"}, Output: linOutput{Failed: true}, Call: call, Return: math.MaxInt64}
	}
	// A failed delete known to have taken effect, if at all, by by (a
	// kill cut it off, and the next server served from by).
	boundedDel := func(call, by int64) porcupine.Operation {
		return porcupine.Operation{Input: linInput{Op: opDelete, Key: "k"}, Output: linOutput{Failed: true}, Call: call, Return: by}
	}
	for _, tc := range []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"missing at start", true, []porcupine.Operation{get("", false, 0, 1)}},
		{"value from nowhere", false, []porcupine.Operation{get("x", true, 0, 1)}},
		{"read own write", true, []porcupine.Operation{put("a", 0, 1), get("a", true, 2, 3)}},
		{"stale read", false, []porcupine.Operation{put("a", 0, 1), put("b", 2, 3), get("a", true, 4, 5)}},
		{"concurrent read may see either", true, []porcupine.Operation{put("a", 0, 1), put("b", 2, 6), get("a", true, 3, 4)}},
		{"read after delete", false, []porcupine.Operation{put("a", 0, 1), del(2, 3), get("a", true, 4, 5)}},
		{"missing after delete", true, []porcupine.Operation{put("a", 0, 1), del(2, 3), get("", false, 4, 5)}},
		{"missing is not empty", false, []porcupine.Operation{put("", 0, 1), get("", false, 2, 3)}},
		{"failed put never applied", true, []porcupine.Operation{put("a", 0, 1), failedPut("b", 2), get("a", true, 3, 4), get("a", true, 5, 6)}},
		{"failed put applied", true, []porcupine.Operation{put("a", 0, 1), failedPut("b", 2), get("b", true, 3, 4)}},
		{"failed put applied late", true, []porcupine.Operation{put("a", 0, 1), failedPut("b", 2), get("a", true, 3, 4), get("b", true, 5, 6)}},
		{"failed put seen then gone", false, []porcupine.Operation{put("a", 0, 1), failedPut("b", 2), get("b", true, 3, 4), get("a", true, 5, 6)}},
		{"failed put seen before its call", false, []porcupine.Operation{get("b", true, 0, 1), failedPut("b", 2)}},
		{"failed delete may apply late", true, []porcupine.Operation{put("a", 0, 1), failedDel(2), get("a", true, 3, 4), get("", false, 5, 6)}},
		{"failed delete then value back", false, []porcupine.Operation{put("a", 0, 1), failedDel(2), get("", false, 3, 4), get("a", true, 5, 6)}},
		{"bounded failed delete never applied", true, []porcupine.Operation{put("a", 0, 1), boundedDel(2, 3), get("a", true, 4, 5), get("a", true, 6, 7)}},
		{"bounded failed delete applied", true, []porcupine.Operation{put("a", 0, 1), boundedDel(2, 3), get("", false, 4, 5)}},
		{"bounded failed delete applied after its bound", false, []porcupine.Operation{put("a", 0, 1), boundedDel(2, 3), get("a", true, 4, 5), get("", false, 6, 7)}},
	} {
		h := boundFailedPuts(append([]porcupine.Operation(nil), tc.h...))
		if got := porcupine.CheckOperations(kvModel, h); got != tc.ok {
			t.Errorf("%s: linearizable = %v; want %v", tc.name, got, tc.ok)
		}
	}
}

func TestBoundFailedPuts(t *testing.T) {
	h := []porcupine.Operation{
		{Input: linInput{Op: opPut, Key: "k", Value: "unseen"}, Output: linOutput{Failed: true}, Call: 1, Return: math.MaxInt64},
		{Input: linInput{Op: opPut, Key: "k", Value: "seen"}, Output: linOutput{Failed: true}, Call: 2, Return: math.MaxInt64},
		{Input: linInput{Op: opGet, Key: "k"}, Output: linOutput{Value: "seen", Exists: true}, Call: 5, Return: 9},
		{Input: linInput{Op: opGet, Key: "k"}, Output: linOutput{Value: "seen", Exists: true}, Call: 3, Return: 7},
	}
	got := boundFailedPuts(h)
	if len(got) != 3 {
		t.Fatalf("kept %d operations; want 3 (the unseen failed Put dropped)", len(got))
	}
	if in := got[0].Input.(linInput); in.Value != "seen" || got[0].Return != 7 {
		t.Errorf("failed Put %q returns at %d; want \"seen\" at 7, the earliest return of a Get that saw it", in.Value, got[0].Return)
	}
}
