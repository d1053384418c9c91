package oblivistore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// tamperRig is a store of capacity 256 (16 partitions of levels 0..6)
// and value size 16 on memory storage, bulk-loaded with 200 keys, whose
// storage a test edits behind its back.
type tamperRig struct {
	t     *testing.T
	b     *mem.Backend
	s     *store
	model map[string]string
	rng   *rand.Rand
}

func newTamperRig(t *testing.T) *tamperRig {
	r := &tamperRig{t: t, b: mem.New(), model: map[string]string{}, rng: rand.New(rand.NewPCG(1, 1))}
	seed := [32]byte{4, 2}
	s, err := open(t.Context(), kv.Env{Backend: r.b, Keys: kvtest.NewKeys(t), Capacity: 256, ValueSize: 16, Fresh: true,
		Options: Options{TestingKnobs: TestingKnobs{Seed: &seed}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r.s = s
	for i := range 200 {
		r.model[fmt.Sprint("k", i)] = fmt.Sprint("k", i, "=v0")
	}
	items := func(yield func(string, []byte) bool) {
		for k, v := range r.model {
			if !yield(k, []byte(v)) {
				return
			}
		}
	}
	if _, err := s.Load(t.Context(), items); err != nil {
		t.Fatal(err)
	}
	return r
}

// core runs f on the store's core once no request and no backend call is
// in flight. The store then stays idle until the next request, so storage
// can be edited without a race with it. f must not fail the test (it runs
// on the store's loop).
func (r *tamperRig) core(f func(c *Core)) {
	r.t.Helper()
	for {
		idle := false
		if err := r.s.onLoop(func() {
			if idle = r.s.core.Idle(); idle {
				f(r.s.core)
			}
		}); err != nil {
			r.t.Fatal(err)
		}
		if idle {
			return
		}
	}
}

// access does one random operation on the loaded keys (a Get, or a Put of
// a new value), checking a Get's value; it returns the error.
func (r *tamperRig) access(i int) error {
	k := fmt.Sprint("k", r.rng.IntN(len(r.model)))
	if r.rng.IntN(2) == 0 {
		v := fmt.Sprint(k, "=v", i)
		err := r.s.Put(r.t.Context(), k, []byte(v))
		if err == nil {
			r.model[k] = v
		}
		return err
	}
	return r.get(k)
}

// get reads k and fails the test on a wrong value.
func (r *tamperRig) get(k string) error {
	got, ok, err := r.s.Get(r.t.Context(), k)
	if err == nil && (!ok || string(got) != r.model[k]) {
		r.t.Fatalf("Get(%s) = %q, %v; want %q: wrong data from tampered storage", k, got, ok, r.model[k])
	}
	return err
}

// expectTampered requires the store to report the tampering as
// kv.ErrTampered, from a Get of key if set (the block the tampering
// touched), or else within 2000 random accesses, every one before it
// right; and to refuse every operation afterwards with it.
func (r *tamperRig) expectTampered(key string) {
	r.t.Helper()
	var err error
	if key != "" {
		err = r.get(key)
	} else {
		for i := 0; err == nil && i < 2000; i++ {
			err = r.access(i)
		}
	}
	if !errors.Is(err, kv.ErrTampered) {
		r.t.Fatalf("after tampering: %v; want kv.ErrTampered", err)
	}
	ctx := r.t.Context()
	_, _, gerr := r.s.Get(ctx, "k1")
	for what, err := range map[string]error{"Get": gerr, "Put": r.s.Put(ctx, "k2", []byte("x")), "Delete": r.s.Delete(ctx, "k3")} {
		if !errors.Is(err, kv.ErrTampered) {
			r.t.Fatalf("a %s after the tampering was detected: %v; want kv.ErrTampered", what, err)
		}
	}
}

// unreadReal returns the keys whose blocks sit, unread, in a level that
// pick accepts, with their slots.
func unreadReal(c *Core, pick func(p int32, l int8) bool) map[string]Slot {
	out := map[string]Slot{}
	for k, loc := range c.server().Where {
		if loc.Where != inLevel || !pick(loc.P, loc.L) || c.server().level(loc.slot()).Read[loc.S] {
			continue
		}
		out[k] = loc.slot()
	}
	return out
}

// anyOf returns some key of m, the smallest for reproducibility.
func anyOf(m map[string]Slot) (string, Slot) {
	keys := slices.Sorted(maps.Keys(m))
	return keys[0], m[keys[0]]
}

func (r *tamperRig) read(addr string) []byte {
	r.t.Helper()
	v, err := r.b.Read(context.Background(), []string{addr})
	if err != nil || v[0] == nil {
		r.t.Fatalf("reading %s: %v", addr, err)
	}
	return v[0]
}

func (r *tamperRig) write(addr string, v []byte) {
	r.t.Helper()
	if err := r.b.Write(context.Background(), []backend.Item{{Addr: addr, Value: v}}); err != nil {
		r.t.Fatal(err)
	}
}

// TestTamperBitFlip: one flipped bit in a slot is kv.ErrTampered: in the
// slot of a real block, at the Get of its key; in an unread dummy slot,
// within random accesses (a dummy read or the level's shuffle reads it).
// No access returns wrong data, and the store refuses everything after.
func TestTamperBitFlip(t *testing.T) {
	t.Run("real", func(t *testing.T) {
		r := newTamperRig(t)
		var key string
		var slot Slot
		r.core(func(c *Core) { key, slot = anyOf(unreadReal(c, func(int32, int8) bool { return true })) })
		v := r.read(slotAddr(slot))
		v[r.rng.IntN(len(v))] ^= 1 << r.rng.IntN(8)
		r.write(slotAddr(slot), v)
		r.expectTampered(key)
	})
	t.Run("dummy", func(t *testing.T) {
		r := newTamperRig(t)
		slot := Slot{S: -1}
		r.core(func(c *Core) {
			lv := &c.server().Parts[3].Levels[c.server().Geo.Top]
			for _, s := range lv.Dummies {
				if !lv.Read[s] {
					slot = Slot{P: 3, L: int8(c.server().Geo.Top), S: s}
					return
				}
			}
		})
		if slot.S < 0 {
			t.Fatal("partition 3's top level has no unread dummy")
		}
		v := r.read(slotAddr(slot))
		v[len(v)-1] ^= 0x80
		r.write(slotAddr(slot), v)
		r.expectTampered("")
	})
}

// TestTamperMoved: a block moved to another slot fails to open there,
// since its seal binds its address: two slots' contents swapped within
// one level (a real block and a dummy), and two real blocks swapped
// across partitions (the same level and slot index, so only the
// partition in the address differs). Each is kv.ErrTampered at the Get
// of a key involved.
func TestTamperMoved(t *testing.T) {
	t.Run("within a level", func(t *testing.T) {
		r := newTamperRig(t)
		var key string
		var a Slot
		b := Slot{S: -1}
		r.core(func(c *Core) {
			key, a = anyOf(unreadReal(c, func(int32, int8) bool { return true }))
			lv := c.server().level(a)
			for _, s := range lv.Dummies {
				if !lv.Read[s] {
					b = Slot{P: a.P, L: a.L, S: s}
					return
				}
			}
		})
		if b.S < 0 {
			t.Fatal("no unread dummy beside the block")
		}
		va, vb := r.read(slotAddr(a)), r.read(slotAddr(b))
		r.write(slotAddr(a), vb)
		r.write(slotAddr(b), va)
		r.expectTampered(key)
	})
	t.Run("across partitions", func(t *testing.T) {
		r := newTamperRig(t)
		var key string
		var a, b Slot
		r.core(func(c *Core) {
			top := int8(c.server().Geo.Top)
			in := func(p int32) map[string]Slot {
				return unreadReal(c, func(q int32, l int8) bool { return q == p && l == top })
			}
			// Two partitions with real blocks in the same top slot.
			bySlot := map[int32]Slot{}
			for _, s := range in(0) {
				bySlot[s.S] = s
			}
			for p := int32(1); p < int32(c.server().Geo.Partitions); p++ {
				for _, k := range slices.Sorted(maps.Keys(in(p))) {
					if o, ok := bySlot[in(p)[k].S]; ok {
						key, a, b = k, in(p)[k], o
						return
					}
				}
			}
		})
		if key == "" {
			t.Fatal("no two partitions hold real blocks in the same slot")
		}
		va, vb := r.read(slotAddr(a)), r.read(slotAddr(b))
		r.write(slotAddr(a), vb)
		r.write(slotAddr(b), va)
		r.expectTampered(key)
	})
}

// TestTamperReplayedLevel: storage answers with an old copy of a level.
// A copy of a filled level's slots is saved; accesses go on until the
// store has rewritten that level through shuffles (a new nonce, filled);
// the old copy is put back. Its blocks were sealed under the old nonce,
// so the first read of the level is kv.ErrTampered: the Get of a key the
// new level holds, or for a level without real blocks, random accesses
// until a dummy read or a shuffle reads it. Every level from 0 to 3 of a
// partition is tried.
//
// For levels 2 and 3 the key read is one whose slot held a real block in
// the old copy too (the test waits for further rewrites until there is
// one), so the kinds agree and only the nonce bound into the seal tells
// the copies apart: without it the Get would return the other key's
// value.
func TestTamperReplayedLevel(t *testing.T) {
	for l := range int8(4) {
		t.Run(fmt.Sprint("level ", l), func(t *testing.T) {
			r := newTamperRig(t)
			// Accesses until partition p's level l is filled.
			var p int32 = -1
			for i := 0; p < 0; i++ {
				if i == 5000 {
					t.Fatalf("level %d of no partition was ever filled", l)
				}
				if err := r.access(i); err != nil {
					t.Fatal(err)
				}
				r.core(func(c *Core) {
					for q := range c.server().Parts {
						if lv := c.server().Parts[q].Levels[l]; lv.Filled && lv.Unread > 0 {
							p = int32(q)
							return
						}
					}
				})
			}
			var key string
			var old map[string][]byte
			real := false
			for attempt := 0; !real && (attempt == 0 || l >= 2); attempt++ {
				if attempt == 200 {
					t.Fatalf("in 200 rewrites of partition %d level %d, no key landed on a slot that held a real block before", p, l)
				}
				// A copy of the level as it is now.
				var nonce uint64
				var wasReal []bool
				r.core(func(c *Core) {
					lv := c.server().Parts[p].Levels[l]
					nonce, wasReal = lv.Nonce, slices.Clone(lv.Real)
				})
				old = map[string][]byte{}
				for s := range int32(slots(int(l))) {
					a := slotAddr(Slot{P: p, L: l, S: s})
					old[a] = r.read(a)
				}
				// Accesses until the store rewrote the level.
				key = ""
				rewritten := false
				for i := 0; !rewritten; i++ {
					if i == 20000 {
						t.Fatalf("partition %d level %d was never rewritten", p, l)
					}
					if err := r.access(i); err != nil {
						t.Fatal(err)
					}
					r.core(func(c *Core) {
						lv := c.server().Parts[p].Levels[l]
						if !lv.Filled || lv.Nonce == nonce || lv.Unread == 0 {
							return
						}
						rewritten = true
						m := unreadReal(c, func(q int32, k int8) bool { return q == p && k == l })
						for _, k := range slices.Sorted(maps.Keys(m)) {
							if wasReal[m[k].S] {
								key, real = k, true
								return
							}
						}
						if len(m) > 0 {
							key, _ = anyOf(m)
						}
					})
				}
			}
			for a, v := range old { // the store is idle: nothing races these
				r.write(a, v)
			}
			t.Logf("partition %d level %d replayed; read first: %q (a real block in the old copy's slot too: %v)", p, l, key, real)
			r.expectTampered(key)
		})
	}
}
