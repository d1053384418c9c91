package taostore_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/taostore"
)

var cfg = kvtest.Config{Protocol: "taostore", Integrity: true}

func TestMain(m *testing.M) { kvtest.Main(m) }

func TestContract(t *testing.T) {
	for _, c := range []kvtest.Config{cfg, {Protocol: "taostore", Integrity: true, Options: taostore.Options{K: 3, CachedLevels: 2}}} {
		for _, st := range kvtest.Storages(t) {
			t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, c, st) })
		}
	}
}

// TestLinearizable: 16 clients mixing GET/SET/DEL, half of them on one
// key, with a small write-back threshold so write-backs overlap reads.
func TestLinearizable(t *testing.T) {
	lin := kvtest.Config{Protocol: "taostore", Options: taostore.Options{K: 4}}
	for _, st := range []kvtest.Storage{kvtest.Mem(), kvtest.Redis(), asyncNetwork(kvtest.Mem())} {
		t.Run(st.Name, func(t *testing.T) {
			s := kvtest.OpenStore(t, lin, st)
			kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 150, DeleteFraction: 0.15})
		})
	}
}

// asyncNetwork wraps a storage so every backend call is delayed by a random
// 0-3 ms: responses come back in a different order than requests went out,
// and write-backs arrive late, as on an asynchronous network.
func asyncNetwork(st kvtest.Storage) kvtest.Storage {
	next := st.New
	st.Name = "async-" + st.Name
	st.New = func(t *testing.T) func() (backend.Backend, error) {
		open := next(t)
		return func() (backend.Backend, error) {
			b, err := open()
			if err != nil {
				return nil, err
			}
			return &jitter{Backend: b, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))}, nil
		}
	}
	return st
}

type jitter struct {
	backend.Backend
	mu  sync.Mutex
	rng *rand.Rand
}

func (j *jitter) sleep() {
	j.mu.Lock()
	d := time.Duration(j.rng.IntN(3000)) * time.Microsecond
	j.mu.Unlock()
	time.Sleep(d)
}

func (j *jitter) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	j.sleep()
	return j.Backend.Read(ctx, addrs)
}

func (j *jitter) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	j.sleep()
	return j.Backend.WriteVersioned(ctx, items)
}

// TestStaleWriteBackLoses: with write-backs delayed at random, some arrive
// after newer ones; the storage refuses them (stale_buckets > 0) and no
// data is lost across a restart.
func TestStaleWriteBackLoses(t *testing.T) {
	st := asyncNetwork(kvtest.Mem())
	c := kvtest.Config{Protocol: "taostore", Options: taostore.Options{K: 1}, Capacity: 64}
	s := kvtest.OpenStore(t, c, st)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				key := string(rune('a' + (w+i)%26))
				if err := s.Put(ctx, key, []byte{byte(w), byte(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	stale := extra(s.Stats(), "stale_buckets")
	t.Logf("stale buckets refused by storage: %v of %v write-backs", stale, extra(s.Stats(), "write_backs"))
	if stale == 0 {
		t.Fatal("no write-back arrived late; the test did not exercise versioning")
	}
	if got := s.Stats().Keys; got != 26 {
		t.Fatalf("%d keys, want 26", got)
	}
}

func extra(st kv.Stats, name string) float64 {
	for _, e := range st.Extra {
		if e.Name == name {
			return e.Value
		}
	}
	return -1
}
