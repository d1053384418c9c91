package bench

import (
	"context"
	"iter"
	"sync"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
)

// Target is what a benchmark drives. Implementations are safe for
// concurrent use.
type Target interface {
	// Get reads key: its value and whether it exists.
	Get(ctx context.Context, key string) ([]byte, bool, error)
	// Put writes key.
	Put(ctx context.Context, key string, val []byte) error
	// Load fills the empty target with items, using up to concurrency
	// parallel requests where that helps.
	Load(ctx context.Context, items iter.Seq2[string, []byte], concurrency int) error
	// Snapshot reads the target's counters.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Close releases the target and removes what the run stored.
	Close(ctx context.Context) error
}

// Snapshot is a target's counters at one moment.
type Snapshot struct {
	// Protocol is the protocol as the target names it ("" if unknown).
	Protocol string
	// Backend holds the backend counters, nil when the target cannot
	// report them (a RESP server without backend fields in INFO).
	Backend *observe.Counters
	// Extra holds protocol-specific counters.
	Extra []kv.Stat
}

// Opener opens a fresh, empty target for one protocol of a run. Nothing
// may be shared between the targets of two protocols.
type Opener func(ctx context.Context, protocol string) (Target, error)

// StoreTarget drives a kv.Store in this process. release is called by
// Close: it closes the store and discards its data (setup's Discard, or
// just Close in tests).
func StoreTarget(s kv.Store, release func(context.Context) error) Target {
	return &storeTarget{s: s, release: release}
}

type storeTarget struct {
	s       kv.Store
	release func(context.Context) error
}

func (t *storeTarget) Get(ctx context.Context, key string) ([]byte, bool, error) {
	return t.s.Get(ctx, key)
}

func (t *storeTarget) Put(ctx context.Context, key string, val []byte) error {
	return t.s.Put(ctx, key, val)
}

// Load uses the protocol's bulk loader when it has one, as every paper
// initialises its store; otherwise it Puts in parallel.
func (t *storeTarget) Load(ctx context.Context, items iter.Seq2[string, []byte], concurrency int) error {
	if l, ok := kv.AsLoader(t.s); ok {
		_, err := l.Load(ctx, items)
		return err
	}
	return parallelPuts(ctx, items, concurrency, t.s.Put)
}

func (t *storeTarget) Snapshot(context.Context) (Snapshot, error) {
	st := t.s.Stats()
	return Snapshot{Protocol: st.Protocol, Backend: &st.Backend, Extra: st.Extra}, nil
}

func (t *storeTarget) Close(ctx context.Context) error { return t.release(ctx) }

// parallelPuts writes items with concurrency workers and returns the first
// error.
func parallelPuts(ctx context.Context, items iter.Seq2[string, []byte], concurrency int,
	put func(context.Context, string, []byte) error) error {
	type item struct {
		k string
		v []byte
	}
	seq := func(yield func(item) bool) {
		for k, v := range items {
			if !yield(item{k, v}) {
				return
			}
		}
	}
	return parallel(ctx, seq, concurrency, func(ctx context.Context, it item) error {
		return put(ctx, it.k, it.v)
	})
}

// parallel runs do on every element of seq with concurrency workers. The
// first error cancels the rest (do sees the cancelled context) and is
// returned.
func parallel[T any](ctx context.Context, seq iter.Seq[T], concurrency int,
	do func(context.Context, T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ch := make(chan T, concurrency)
	var wg sync.WaitGroup
	for range max(concurrency, 1) {
		wg.Go(func() {
			for x := range ch {
				if err := do(ctx, x); err != nil {
					cancel(err)
				}
			}
		})
	}
	send(ctx, ch, seq)
	wg.Wait()
	return context.Cause(ctx)
}

// send feeds seq into ch until it ends or ctx is done, then closes ch.
func send[T any](ctx context.Context, ch chan<- T, seq iter.Seq[T]) {
	defer close(ch)
	for x := range seq {
		select {
		case ch <- x:
		case <-ctx.Done():
			return
		}
	}
}
