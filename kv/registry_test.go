package kv

import (
	"context"
	"slices"
	"testing"
)

func noStore(context.Context, Env) (Store, error) { return nil, nil }

// TestRegisterLookup: a descriptor registered is found whole under its
// name and listed; an unknown name is not found.
func TestRegisterLookup(t *testing.T) {
	p := Protocol{Name: "kv-test-registry", Summary: "a test", Open: noStore, Options: sampleOptions{}}
	Register(p)
	got, ok := Lookup(p.Name)
	if !ok || got.Name != p.Name || got.Summary != p.Summary || got.Options != p.Options || got.Open == nil {
		t.Errorf("Lookup = %+v, %v; want %+v", got, ok, p)
	}
	if !slices.Contains(Protocols(), p.Name) || !slices.IsSorted(Protocols()) {
		t.Errorf("Protocols() = %v; want %s in sorted order", Protocols(), p.Name)
	}
	if _, ok := Lookup("kv-test-nosuch"); ok {
		t.Error("an unregistered protocol was found")
	}
}

// TestRegisterRefuses: a duplicate name, a missing name or Open, and
// Options that are no struct are programming errors.
func TestRegisterRefuses(t *testing.T) {
	Register(Protocol{Name: "kv-test-dup", Open: noStore})
	for _, p := range []Protocol{
		{Name: "kv-test-dup", Open: noStore},
		{Name: "", Open: noStore},
		{Name: "kv-test-noopen"},
		{Name: "kv-test-badoptions", Open: noStore, Options: 3},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%+v) did not panic", p)
				}
			}()
			Register(p)
		}()
	}
}

// TestOptionsFingerprint: the fingerprint is stable (a fixed value), does
// not depend on map order, and changes with the protocol, a name or a
// value.
func TestOptionsFingerprint(t *testing.T) {
	base := OptionsFingerprint("treebeard", map[string]string{"Trees": "8", "Epoch": "2ms"})
	if len(base) != 16 {
		t.Fatalf("fingerprint %q; want 16 hex digits", base)
	}
	for range 10 {
		if got := OptionsFingerprint("treebeard", map[string]string{"Epoch": "2ms", "Trees": "8"}); got != base {
			t.Fatalf("fingerprint %s then %s for the same settings", base, got)
		}
	}
	if none, empty := OptionsFingerprint("treebeard", nil), OptionsFingerprint("treebeard", map[string]string{}); none != empty {
		t.Errorf("no settings: %s and %s", none, empty)
	}
	for _, other := range []string{
		OptionsFingerprint("taostore", map[string]string{"Trees": "8", "Epoch": "2ms"}),
		OptionsFingerprint("treebeard", map[string]string{"Trees": "8"}),
		OptionsFingerprint("treebeard", map[string]string{"Trees": "4", "Epoch": "2ms"}),
		OptionsFingerprint("treebeard", map[string]string{"Trees": "8", "Epoch": "2ms", "K": "7"}),
		OptionsFingerprint("treebeard", map[string]string{"Epoch": "2ms\nTrees=8"}),
		OptionsFingerprint("treebeard", map[string]string{"Epoch": "2ms", "Trees": "8", "": ""}),
	} {
		if other == base {
			t.Errorf("another protocol or settings share fingerprint %s", base)
		}
	}
	// Operators compare fingerprints across builds: the function is fixed.
	if got, want := base, "6959c66dd949bc1d"; got != want {
		t.Errorf("fingerprint %s; it is fixed at %s for these settings", got, want)
	}
}

type nilStore struct{ Store }

// TestFactoryOf: a failed open gives a nil Store (not a typed nil), a
// successful one its store.
func TestFactoryOf(t *testing.T) {
	failing := FactoryOf(func(context.Context, Env) (*nilStore, error) { return nil, ErrFull })
	if s, err := failing(t.Context(), Env{}); s != nil || err != ErrFull {
		t.Errorf("failed open: %#v, %v; want a nil Store and the error", s, err)
	}
	want := &nilStore{}
	opening := FactoryOf(func(context.Context, Env) (*nilStore, error) { return want, nil })
	if s, err := opening(t.Context(), Env{}); s != want || err != nil {
		t.Errorf("open: %#v, %v; want the store", s, err)
	}
}
