package baseline_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	_ "github.com/oblivkv/oblivkv/protocol/baseline"
)

var (
	plain = kvtest.Config{Protocol: "plain"} // no integrity: the tamper tests do not apply
	// encrypted seals each value under its address alone: a flipped bit
	// or a moved value fails to open, but an older value put back at its
	// address opens (it defeats no adversary), so the replay test does
	// not apply.
	encrypted = kvtest.Config{Protocol: "encrypted", Integrity: true, NoFreshness: true}
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
