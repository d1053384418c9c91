package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// updates is an Updater that records the mutations it is given and
// answers every one with its result.
type updates struct {
	got    []Mutation
	result Result
	err    error
}

func (u *updates) Update(_ context.Context, key string, m Mutation) (Result, error) {
	if key != "k" {
		return Result{}, fmt.Errorf("Update of key %q; want %q", key, "k")
	}
	u.got = append(u.got, m)
	return u.result, u.err
}

// ByUpdate's Get, Put and Delete are one Update each, of MutRead, MutSet
// (of the value given) and MutDelete, and hand back its result and error.
func TestByUpdate(t *testing.T) {
	ctx, errStorage := t.Context(), errors.New("storage failed")
	u := &updates{result: Result{Found: true, Old: []byte("old")}}
	s := ByUpdate{u}
	if v, ok, err := s.Get(ctx, "k"); string(v) != "old" || !ok || err != nil {
		t.Errorf("Get = %q, %v, %v; want the Update's %q, true, nil", v, ok, err, "old")
	}
	if err := s.Put(ctx, "k", []byte("new")); err != nil {
		t.Errorf("Put: %v", err)
	}
	u.err = errStorage
	if err := s.Delete(ctx, "k"); !errors.Is(err, errStorage) {
		t.Errorf("Delete = %v; want the Update's error", err)
	}
	ops := []MutationOp{MutRead, MutSet, MutDelete}
	if len(u.got) != len(ops) || !slices.EqualFunc(u.got, ops, func(m Mutation, op MutationOp) bool { return m.Op == op }) ||
		string(u.got[1].Arg) != "new" {
		t.Fatalf("Updates %+v; want one each of %v, the MutSet of %q", u.got, ops, "new")
	}
}

func TestApply(t *testing.T) {
	tests := []struct {
		name       string
		m          Mutation
		old        string
		found      bool
		want       string
		wantExists bool
		err        error
	}{
		{"incr missing", Mutation{Op: MutIncrBy, Arg: []byte("1")}, "", false, "1", true, nil},
		{"incr negative", Mutation{Op: MutIncrBy, Arg: []byte("-10")}, "3", true, "-7", true, nil},
		{"incr leading zero", Mutation{Op: MutIncrBy, Arg: []byte("1")}, "01", true, "01", true, ErrNotInteger},
		{"incr minus zero", Mutation{Op: MutIncrBy, Arg: []byte("1")}, "-0", true, "-0", true, ErrNotInteger},
		{"incr plus sign", Mutation{Op: MutIncrBy, Arg: []byte("+1")}, "1", true, "1", true, ErrNotInteger},
		{"incr space", Mutation{Op: MutIncrBy, Arg: []byte("1")}, " 1", true, " 1", true, ErrNotInteger},
		{"incr empty value", Mutation{Op: MutIncrBy, Arg: []byte("1")}, "", true, "", true, ErrNotInteger},
		{"incr overflow", Mutation{Op: MutIncrBy, Arg: []byte("1")}, "9223372036854775807", true, "9223372036854775807", true, ErrOverflow},
		{"decr underflow", Mutation{Op: MutIncrBy, Arg: []byte("-2")}, "-9223372036854775807", true, "-9223372036854775807", true, ErrOverflow},
		{"float", Mutation{Op: MutIncrByFloat, Arg: []byte("0.1")}, "10.50", true, "10.6", true, nil},
		{"float exponent", Mutation{Op: MutIncrByFloat, Arg: []byte("2.0e2")}, "5.0e3", true, "5200", true, nil},
		{"float nan", Mutation{Op: MutIncrByFloat, Arg: []byte("nan")}, "1", true, "1", true, ErrNotFloat},
		{"float inf", Mutation{Op: MutIncrByFloat, Arg: []byte("1e308")}, "1e308", true, "1e308", true, ErrNotFinite},
		{"append", Mutation{Op: MutAppend, Arg: []byte("def")}, "abc", true, "abcdef", true, nil},
		{"append too large", Mutation{Op: MutAppend, Arg: []byte("defgh")}, "abcdef", true, "abcdef", true, ErrValueTooLarge},
		{"set too large", Mutation{Op: MutSet, Arg: []byte("0123456789")}, "", false, "", false, ErrValueTooLarge},
		{"set nx existing", Mutation{Op: MutSet, Arg: []byte("x"), If: IfMissing}, "a", true, "a", true, nil},
		{"set xx missing", Mutation{Op: MutSet, Arg: []byte("x"), If: IfExists}, "", false, "", false, nil},
		{"delete", Mutation{Op: MutDelete}, "a", true, "", false, nil},
		{"unknown", Mutation{Op: 99}, "a", true, "a", true, nil},
	}
	for _, tc := range tests {
		var old []byte
		if tc.found {
			old = []byte(tc.old)
		}
		next, exists, _, err := tc.m.Apply(old, tc.found, 8)
		if tc.name == "unknown" {
			if err == nil {
				t.Errorf("%s: no error", tc.name)
			}
			continue
		}
		if !errors.Is(err, tc.err) || string(next) != tc.want || exists != tc.wantExists {
			t.Errorf("%s: Apply = %q, %v, %v; want %q, %v, %v", tc.name, next, exists, err, tc.want, tc.wantExists, tc.err)
		}
	}
}

func TestApplyResult(t *testing.T) {
	r := func(m Mutation, old string, found bool) Result {
		var o []byte
		if found {
			o = []byte(old)
		}
		_, _, res, err := m.Apply(o, found, 64)
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		return res
	}
	if got := r(Mutation{Op: MutRead}, "", true); got.Old == nil || !got.Found || got.Written {
		t.Errorf("Read of an empty value = %+v; want found, Old empty but not nil", got)
	}
	if got := r(Mutation{Op: MutSet, Arg: []byte("new"), ReturnOld: true}, "old", true); string(got.Old) != "old" || !got.Written || got.Len != 3 {
		t.Errorf("Set returning old = %+v", got)
	}
	if got := r(Mutation{Op: MutSet, Arg: []byte("new")}, "old", true); got.Old != nil {
		t.Errorf("Set not asking for the old value returned %q", got.Old)
	}
	if got := r(Mutation{Op: MutIncrBy, Arg: []byte("2")}, "40", true); string(got.New) != "42" || !got.Written {
		t.Errorf("IncrBy = %+v; want New 42", got)
	}
}

func TestRejection(t *testing.T) {
	for _, e := range []error{ErrNotInteger, ErrNotFloat, ErrOverflow, ErrNotFinite, fmt.Errorf("%w: 9 bytes", ErrValueTooLarge)} {
		r := RejectionOf(e)
		if r == 0 || !errors.Is(e, r.Err()) {
			t.Errorf("RejectionOf(%v) = %d, whose error is %v", e, r, r.Err())
		}
	}
	for _, e := range []error{nil, ErrFull, errors.New("other")} {
		if r := RejectionOf(e); r != 0 || r.Err() != nil {
			t.Errorf("RejectionOf(%v) = %d; want 0", e, r)
		}
	}
}
