package kvtest

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
)

// Jittered wraps a storage so every Read, Write and WriteVersioned is
// delayed by a random 0 to max: replies come back in another order than
// the calls went out, as on an asynchronous network, and a protocol's
// concurrent parts interleave differently on every run. The delays of
// each opening are drawn from the test's Seed (logged; fixed by
// OBLIVKV_TEST_SEED), so a run's delays can be replayed; the interleaving
// is still the scheduler's.
func Jittered(st Storage, max time.Duration) Storage {
	next := st.New
	st.Name = "jitter-" + st.Name
	st.New = func(t *testing.T) func() (backend.Backend, error) {
		open, seed := next(t), Seed(t)
		var opens atomic.Uint64
		return func() (backend.Backend, error) {
			b, err := open()
			if err != nil {
				return nil, err
			}
			rng := rand.New(rand.NewPCG(seed, jitterStream+opens.Add(1)-1))
			return &jitter{Backend: b, max: max, rng: rng}, nil
		}
	}
	return st
}

type jitter struct {
	backend.Backend
	max time.Duration
	mu  sync.Mutex
	rng *rand.Rand
}

func (j *jitter) sleep() {
	j.mu.Lock()
	d := time.Duration(j.rng.Int64N(int64(j.max) + 1))
	j.mu.Unlock()
	time.Sleep(d)
}

func (j *jitter) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	j.sleep()
	return j.Backend.Read(ctx, addrs)
}

func (j *jitter) Write(ctx context.Context, items []backend.Item) error {
	j.sleep()
	return j.Backend.Write(ctx, items)
}

func (j *jitter) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	j.sleep()
	return j.Backend.WriteFenced(ctx, f, items)
}

func (j *jitter) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	j.sleep()
	return j.Backend.WriteVersioned(ctx, items)
}
