package kvtest

import (
	"maps"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
)

// Model is what a store must hold after a sequence of writes: each key
// written, with its last acknowledged value, or nil once deleted. A test
// that knows a write took effect without its acknowledgement (its journal
// record was durable) sets the key itself.
type Model map[string][]byte

// Put puts key=val in s and, once acknowledged, in m.
func (m Model) Put(t testing.TB, s kv.Store, key, val string) {
	t.Helper()
	mustPut(t, s, key, []byte(val))
	m[key] = []byte(val)
}

// Delete deletes key from s and, once acknowledged, from m.
func (m Model) Delete(t testing.TB, s kv.Store, key string) {
	t.Helper()
	mustDelete(t, s, key)
	m[key] = nil
}

// CheckNames checks that s, if its protocol names its keys
// (kv.KeyLister), names exactly the keys m holds; when says when.
func (m Model) CheckNames(t testing.TB, s kv.Store, when string) {
	t.Helper()
	l, ok := kv.AsKeyLister(s)
	if !ok {
		return
	}
	got, err := l.StoredKeys(t.Context())
	if err != nil {
		t.Fatalf("%s: StoredKeys: %v", when, err)
	}
	var want []string
	for k, v := range m {
		if v != nil {
			want = append(want, k)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: StoredKeys = %q, want %q", when, got, want)
	}
}

// Check reads every key of m from s, in order, and fails t at the first
// that does not hold its value (a deleted key: missing); when says when.
func (m Model) Check(t testing.TB, s kv.Store, when string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		got, ok, err := s.Get(t.Context(), k)
		if want := m[k]; err != nil || ok != (want != nil) || string(got) != string(want) {
			t.Fatalf("%s: Get(%q) = %q, %v, %v; want %q, %v", when, k, got, ok, err, want, want != nil)
		}
	}
}
