package waffle

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/oblivkv/oblivkv/internal/sealedstate"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// stateAddr holds the sealed proxy state between a clean Close and the
// next open.
const stateAddr = "wf/state"

// deleteChunk bounds the addresses of one backend delete of a bulk load.
const deleteChunk = 1 << 14

// state is what the proxy keeps between runs.
type state struct {
	Params        params
	TS, LastReset uint64
	Objects       []objectState
	Cache         []cacheState // most recently used first
	Counters      counters
}

// params are the options a store is written with; reopening it with
// others is refused.
type params struct{ B, R, FD, D, C int }

func (o Options) params() params { return params{B: o.B, R: o.R, FD: o.FD, D: o.D, C: o.C} }

type objectState struct {
	Dummy          bool
	Key            string
	TS, Order, Tie uint64
}

type cacheState struct {
	Dummy bool
	Key   string
	Val   []byte
}

// writeInitial lays out a fresh store: N+D dummies, the spare capacity of
// the N keys plus the D dummies of a full store. An insert later takes one
// dummy's place.
func (s *store) writeInitial(ctx context.Context) error {
	if err := s.layout(ctx, nil, 0); err != nil {
		return fmt.Errorf("waffle: writing the initial dummies: %w", err)
	}
	return nil
}

// Load implements kv.Loader (Sec. 6.1): the items and the dummies that
// fill the spare capacity are laid out afresh, and the previous dummies
// deleted.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nReal > 0 {
		return s.nReal, kv.ErrNotEmpty
	}
	objs, err := s.collect(items)
	if err != nil {
		return 0, err
	}
	n, old := len(objs), s.storedAddrs()
	if err := s.layout(ctx, objs, s.ts+1); err != nil {
		return 0, err // the old layout is still in force
	}
	if err := s.deleteChunks(ctx, old); err != nil {
		s.counters.DeleteErrors++
	}
	return n, nil
}

// collect returns the distinct keys of items (the last value of each
// wins), or kv.ErrFull beyond the capacity.
func (s *store) collect(items iter.Seq2[string, []byte]) ([]cached, error) {
	var objs []cached
	at := map[string]int{}
	for k, v := range items {
		v = append([]byte{}, v...)
		if i, dup := at[k]; dup {
			objs[i].val = v
			continue
		}
		if len(objs) == s.capacity {
			return nil, errFull(s.capacity)
		}
		at[k] = len(objs)
		objs = append(objs, cached{ref: ref{Key: k}, val: v})
	}
	return objs, nil
}

// layout writes a new layout at timestamp ts (Sec. 6.1) of the real
// objects items and the N+D-len(items) dummies that fill the spare
// capacity: C random real objects (topped up with dummies when there are
// fewer) fill the cache, which always holds exactly C objects between
// batches; the others are written shuffled, in large backend writes. The
// layout replaces the proxy's state only once every write succeeded.
func (s *store) layout(ctx context.Context, items []cached, ts uint64) error {
	nReal := len(items)
	s.rng.Shuffle(nReal, func(i, j int) { items[i], items[j] = items[j], items[i] })
	objs, cache := make(map[ref]*object, s.capacity+s.opts.D), list.New()
	for len(items) < s.capacity+s.opts.D {
		d := newDummy(s.rng, objs)
		objs[d] = nil
		items = append(items, cached{ref: d})
	}
	for i, c := range items {
		o := &object{ts: ts, order: ts}
		objs[c.ref] = o
		if i < s.opts.C {
			o.elem = cache.PushBack(&cached{ref: c.ref, val: c.val})
		}
	}
	stored := items[s.opts.C:]
	s.rng.Shuffle(len(stored), func(i, j int) { stored[i], stored[j] = stored[j], stored[i] })
	w := tree.BatchWriter{B: s.b}
	for _, c := range stored {
		if err := w.Add(ctx, s.item(c.ref, ts, c.val)); err != nil {
			return err
		}
	}
	if err := w.Flush(ctx); err != nil {
		return err
	}
	s.objs, s.cache, s.ts, s.nReal = objs, cache, ts, nReal
	s.rebuild(false)
	s.resetDummies()
	return nil
}

// storedAddrs returns the addresses of the objects on storage.
func (s *store) storedAddrs() []string {
	var addrs []string
	for rf, o := range s.objs {
		if o.elem == nil {
			addrs = append(addrs, s.addr(rf, o.ts))
		}
	}
	return addrs
}

func (s *store) deleteChunks(ctx context.Context, addrs []string) error {
	for len(addrs) > 0 {
		n := min(deleteChunk, len(addrs))
		if err := s.b.Delete(ctx, addrs[:n]); err != nil {
			return err
		}
		addrs = addrs[n:]
	}
	return nil
}

// Close stops batching, saves the proxy state sealed and closes the
// backend. The caller (kv) guarantees no request is in flight.
func (s *store) Close() error {
	close(s.stop)
	<-s.loopDone
	err := s.saveState(context.Background())
	return errors.Join(err, s.b.Close())
}

func (s *store) saveState(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := state{Params: s.opts.params(), TS: s.ts, LastReset: s.lastReset, Counters: s.counters}
	for rf, o := range s.objs {
		st.Objects = append(st.Objects, objectState{Dummy: rf.Dummy, Key: rf.Key, TS: o.ts, Order: o.order, Tie: o.tie})
	}
	for e := s.cache.Front(); e != nil; e = e.Next() {
		c := e.Value.(*cached)
		st.Cache = append(st.Cache, cacheState{Dummy: c.ref.Dummy, Key: c.ref.Key, Val: c.val})
	}
	return sealedstate.Save(ctx, s.b, s.keys, stateAddr, st)
}

// loadState restores the state saved by the last clean Close, then
// deletes it, so a crash from here on is detected at the next open.
func (s *store) loadState(ctx context.Context) error {
	var st state
	if err := sealedstate.Require(ctx, s.b, s.keys, stateAddr, &st); err != nil {
		return fmt.Errorf("waffle: %w", err)
	}
	if want := s.opts.params(); st.Params != want {
		return fmt.Errorf("%w: the store was written with %+v, the options ask for %+v", kv.ErrMismatch, st.Params, want)
	}
	s.ts, s.lastReset, s.counters = st.TS, st.LastReset, st.Counters
	for _, ob := range st.Objects {
		s.objs[ref{Dummy: ob.Dummy, Key: ob.Key}] = &object{ts: ob.TS, order: ob.Order, tie: ob.Tie}
		if !ob.Dummy {
			s.nReal++
		}
	}
	for _, c := range st.Cache {
		rf := ref{Dummy: c.Dummy, Key: c.Key}
		o := s.objs[rf]
		if o == nil {
			return fmt.Errorf("%w: the saved cache names an unknown object", kv.ErrTampered)
		}
		o.elem = s.cache.PushBack(&cached{ref: rf, val: c.Val})
	}
	s.rebuild(false)
	s.rebuild(true)
	return sealedstate.Delete(ctx, s.b, s.keys, stateAddr)
}
