// Package dump reads every key and value of a store through the store's
// own Gets, for `oblivkv dump`: the export half of moving a store to
// another protocol or build.
//
// It owns the shape of that full scan: exactly Capacity Gets, one of each
// stored key (named by kv.KeyLister from the store's trusted state) and
// the rest of names the store does not hold, all in one random order drawn
// from a seed of package random, so that storage sees ordinary accesses
// whose number does not depend on how many keys the store holds. It must
// never read storage itself, nor let the number or the kind of the
// accesses it makes depend on the keys, their number or their values.
package dump

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/random"
)

// Workers is the number of Gets a dump keeps in flight, so that protocols
// that answer in batches (cloak, waffle) fill them.
const Workers = 64

// absentNameSize is the length of the names Gets that find nothing ask
// for (or the store's maximum key size, if smaller).
const absentNameSize = 16

// ErrCannotName reports a store whose protocol cannot name its keys (it
// does not implement kv.KeyLister).
var ErrCannotName = errors.New("the protocol cannot name the keys it holds, so they cannot be listed for a dump")

// Plan returns the names a dump of s asks for, in the order it asks:
// every key s holds and as many names it does not hold as make Capacity
// in all, shuffled.
func Plan(ctx context.Context, s kv.Store) ([]string, error) {
	st := s.Stats()
	lister, ok := kv.AsKeyLister(s)
	if !ok {
		return nil, fmt.Errorf("dump: protocol %s: %w", st.Protocol, ErrCannotName)
	}
	keys, err := lister.StoredKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("dump: listing the keys: %w", err)
	}
	if len(keys) > st.Capacity {
		return nil, fmt.Errorf("dump: the store names %d keys, more than its capacity %d", len(keys), st.Capacity)
	}
	seed, err := random.Fresh()
	if err != nil {
		return nil, err
	}
	rng := rand.New(random.New(seed))
	names, err := withAbsent(keys, st.Capacity, min(absentNameSize, st.MaxKeySize), rng)
	if err != nil {
		return nil, err
	}
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names, nil
}

// withAbsent returns keys followed by distinct random names of size bytes
// that are not among them, capacity names in all.
func withAbsent(keys []string, capacity, size int, rng *rand.Rand) ([]string, error) {
	taken := make(map[string]bool, capacity)
	for _, k := range keys {
		taken[k] = true
	}
	names := append(make([]string, 0, capacity), keys...)
	buf := make([]byte, size)
	for tries := 0; len(names) < capacity; tries++ {
		if tries > 16*capacity {
			return nil, fmt.Errorf("dump: found too few names absent from the store among those of %d bytes", size)
		}
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		if name := string(buf); !taken[name] {
			taken[name] = true
			names = append(names, name)
		}
	}
	return names, nil
}

// All reads every key s holds through s.Get, in the order Plan draws,
// Workers at a time, and gives each found key and its value to emit (one
// call at a time, in no particular order). It returns how many records
// it gave. A key deleted meanwhile is left out.
func All(ctx context.Context, s kv.Store, emit func(key string, value []byte) error) (int, error) {
	names, err := Plan(ctx, s)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex
		next, n int
		wg      sync.WaitGroup
	)
	take := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(names) || ctx.Err() != nil {
			return "", false
		}
		next++
		return names[next-1], true
	}
	for range Workers {
		wg.Go(func() {
			for name, ok := take(); ok; name, ok = take() {
				val, found, err := s.Get(ctx, name)
				if err == nil && found {
					mu.Lock()
					if err = emit(name, val); err == nil {
						n++
					}
					mu.Unlock()
				}
				if err != nil {
					cancel(fmt.Errorf("dump: reading a key: %w", err))
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return n, err
	}
	return n, nil
}
