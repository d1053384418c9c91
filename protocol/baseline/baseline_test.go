package baseline_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	_ "github.com/oblivkv/oblivkv/protocol/baseline"
)

var (
	plain = kvtest.Config{Protocol: "plain", NamesKeys: true} // no integrity: the tamper tests do not apply
	// encrypted seals each value under its address alone: a flipped bit
	// or a moved value fails to open, but an older value put back at its
	// address opens (it defeats no adversary), so the replay test does
	// not apply.
	encrypted = kvtest.Config{Protocol: "encrypted", Integrity: true, NoFreshness: true, NamesKeys: true}
)

func TestMain(m *testing.M) { kvtest.Main(m) }

func TestContract(t *testing.T) {
	for _, cfg := range []kvtest.Config{plain, encrypted} {
		for _, st := range kvtest.Storages(t) {
			t.Run(cfg.Protocol+"/"+st.Name, func(t *testing.T) { kvtest.RunContract(t, cfg, st) })
		}
	}
}

func TestLinearizable(t *testing.T) {
	for _, cfg := range []kvtest.Config{plain, encrypted} {
		for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Redis()} {
			t.Run(cfg.Protocol+"/"+st.Name, func(t *testing.T) {
				kvtest.CheckLinearizable(t, kvtest.OpenStore(t, cfg, st), kvtest.LinOptions{Clients: 8})
			})
		}
	}
}

// The two baselines differ in what the storage operator sees: plain shows
// keys and values; encrypted shows neither.
func TestWhatStorageSees(t *testing.T) {
	const key, val = "secret-key-name", "secret-value-bytes"
	for _, tc := range []struct {
		cfg     kvtest.Config
		visible bool
	}{{plain, true}, {encrypted, false}} {
		t.Run(tc.cfg.Protocol, func(t *testing.T) {
			var stored []string
			var values [][]byte
			st := kvtest.Mem()
			st.New = spy(st.New, &stored, &values)
			s := kvtest.OpenStore(t, tc.cfg, st)
			if err := s.Put(t.Context(), key, []byte(val)); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			keySeen, valSeen := false, false
			for _, a := range stored {
				keySeen = keySeen || strings.Contains(a, key)
			}
			for _, v := range values {
				valSeen = valSeen || bytes.Contains(v, []byte(val))
			}
			if len(stored) == 0 {
				t.Fatal("spy saw no stored addresses")
			}
			if keySeen != tc.visible || valSeen != tc.visible {
				t.Errorf("%s: key visible %v, value visible %v in storage; want both %v",
					tc.cfg.Protocol, keySeen, valSeen, tc.visible)
			}
		})
	}
}

// spy wraps a storage so that, when its handle is closed, every stored
// address (but the metadata) and value is copied out.
func spy(next func(*testing.T) func() (backend.Backend, error), addrs *[]string, vals *[][]byte) func(*testing.T) func() (backend.Backend, error) {
	return func(t *testing.T) func() (backend.Backend, error) {
		open := next(t)
		return func() (backend.Backend, error) {
			b, err := open()
			if err != nil {
				return nil, err
			}
			return &spied{Backend: b, t: t, addrs: addrs, vals: vals}, nil
		}
	}
}

type spied struct {
	backend.Backend
	t     *testing.T
	addrs *[]string
	vals  *[][]byte
}

func (s *spied) Close() error {
	ctx := s.t.Context()
	err := s.Scan(ctx, "", func(a string) error {
		if a != kv.MetaAddr {
			*s.addrs = append(*s.addrs, a)
		}
		return nil
	})
	if err != nil {
		return err
	}
	got, err := s.Read(ctx, *s.addrs)
	if err != nil {
		return err
	}
	*s.vals = got
	return s.Backend.Close()
}

// TestEncryptedNamesOlderBlocks: encrypted seals a key's name with its
// value. A value of an older build, sealed alone under its address, still
// reads, but its key cannot be named: StoredKeys says so rather than leave
// the key out of a dump. A block that opens under neither form is
// tampered.
func TestEncryptedNamesOlderBlocks(t *testing.T) {
	ctx := t.Context()
	b, keys := mem.New(), kvtest.NewKeys(t)
	open := func() kv.Store {
		b.Reopen()
		s, err := kv.Open(ctx, kv.Config{Protocol: "encrypted", Backend: b, Keys: keys, Capacity: 16, ValueSize: 32, MaxKeySize: 32})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open()
	if err := s.Put(ctx, "named", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	l, _ := kv.AsKeyLister(s)
	if got, err := l.StoredKeys(ctx); err != nil || len(got) != 1 || got[0] != "named" {
		t.Fatalf("StoredKeys = %q, %v; want [named]", got, err)
	}
	id := keys.PRF([]byte("older"))
	addr := "e/" + hex.EncodeToString(id[:])
	older := keys.Seal(nil, []byte(addr), []byte("v0"))
	if err := b.Write(ctx, []backend.Item{{Addr: addr, Value: older}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open()
	if val, ok, err := s.Get(ctx, "older"); err != nil || !ok || string(val) != "v0" {
		t.Fatalf("Get of an older block = %q, %v, %v; want v0", val, ok, err)
	}
	l, _ = kv.AsKeyLister(s)
	if got, err := l.StoredKeys(ctx); err == nil || !strings.Contains(err.Error(), "older build") {
		t.Fatalf("StoredKeys with an older block = %q, %v; want an error naming the older build", got, err)
	}
	if err := b.Write(ctx, []backend.Item{{Addr: addr, Value: append(older[:len(older)-1:len(older)-1], older[len(older)-1]^1)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.StoredKeys(ctx); !errors.Is(err, kv.ErrTampered) {
		t.Fatalf("StoredKeys with a flipped block = %v, want ErrTampered", err)
	}
}
