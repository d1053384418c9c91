package oblivistore_test

import (
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/oblivistore"
)

var cfg = kvtest.Config{Protocol: "oblivistore", Integrity: true, Durable: true, NamesKeys: true}

func TestMain(m *testing.M) { kvtest.Main(m) }

func TestContract(t *testing.T) {
	for _, st := range kvtest.Storages(t) {
		t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, cfg, st) })
	}
}

// TestMessagesCrossAsBytes: with every message between the Front and
// the partition groups encoded, sealed under the store key and opened on
// its way, as it crosses between processes, the store keeps its contract
// and stays linearizable, with one group and with three: nothing but the
// messages' sealed bytes passes between them.
func TestMessagesCrossAsBytes(t *testing.T) {
	wire := kvtest.Config{Protocol: "oblivistore", Integrity: true, Durable: true, NamesKeys: true, Options: oblivistore.Options{TestingKnobs: oblivistore.TestingKnobs{Wire: true}}}
	kvtest.RunContract(t, wire, kvtest.Mem())
	lin := wire
	lin.Options = oblivistore.Options{EvictionRate: 1.5, Groups: 3, TestingKnobs: oblivistore.TestingKnobs{Wire: true}}
	kvtest.CheckLinearizable(t, kvtest.OpenStore(t, lin, kvtest.Mem()), kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
}

// TestLinearizable: 16 clients mixing GET/SET/DEL, half of them on one
// hot key, with a fractional eviction rate, so repeated accesses overlap
// shuffles and early cache-ins.
func TestLinearizable(t *testing.T) {
	lin := kvtest.Config{Protocol: "oblivistore", Options: oblivistore.Options{EvictionRate: 1.5}}
	for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Redis(), kvtest.Jittered(kvtest.Mem(), 3*time.Millisecond)} {
		t.Run(st.Name, func(t *testing.T) {
			s := kvtest.OpenStore(t, lin, st)
			kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
		})
	}
	// INCR, APPEND and SETNX among GET, SET and DEL, applied by the Front
	// once the block is in trusted memory (a blind SET before that).
	t.Run("mutations", func(t *testing.T) {
		s := kvtest.OpenStore(t, lin, kvtest.Jittered(kvtest.Mem(), 3*time.Millisecond))
		kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.1, MutationFraction: 0.6})
	})
}
