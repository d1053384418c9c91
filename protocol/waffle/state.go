package waffle

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/sealedstate"
	"github.com/oblivkv/oblivkv/kv"
)

// stateAddr holds the sealed proxy state between a clean Close and the
// next open.
const stateAddr = "wf/state"

// initBatchBytes bounds one backend write of the initial layout.
const initBatchBytes = 4 << 20

// state is what the proxy keeps between runs.
type state struct {
	B, R, FD, D, C       int
	TS, LastReset, NextD uint64
	Objects              []objectState
	Cache                []cacheState // most recently used first
	Counters             counters
}

type objectState struct {
	Dummy          bool
	Key            string
	TS, Order, Tie uint64
	Cached         bool
}

type cacheState struct {
	Dummy bool
	Key   string
	Val   []byte
}

// writeInitial lays out a fresh store (Sec. 6.1 with no real objects yet):
// N+D dummies, the spare capacity of the N keys plus the D dummies of a
// full store. C of them fill the cache, which always holds exactly C
// objects between batches; the others are written at timestamp 0, shuffled,
// in large batches. An insert later takes one dummy's place.
func (s *store) writeInitial(ctx context.Context) error {
	total := s.capacity + s.opts.D
	var items []backend.Item
	for i := range total {
		rf := s.newDummy()
		o := &object{tie: s.rng.Uint64()}
		s.objs[rf] = o
		if i < s.opts.C {
			o.elem = s.cache.PushBack(&cached{ref: rf})
			continue
		}
		a := s.addr(rf, 0)
		items = append(items, backend.Item{Addr: a, Value: s.seal(a, nil)})
	}
	s.rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	s.resetDummies()
	if err := s.writeChunks(ctx, items); err != nil {
		return fmt.Errorf("waffle: writing the initial dummies: %w", err)
	}
	return nil
}

// Load implements kv.Loader (Sec. 6.1): C random items go to the cache;
// the other items and the dummies (N+D-items of them, C-cached of them in
// the cache) are written shuffled, in large batches, under fresh ids; the
// previous dummies are deleted.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nReal > 0 {
		return s.nReal, kv.ErrNotEmpty
	}
	values := map[string][]byte{}
	var keys []string
	for k, v := range items {
		if _, dup := values[k]; !dup {
			keys = append(keys, k)
		}
		values[k] = append([]byte{}, v...)
		if len(values) > s.capacity {
			return 0, errFull(s.capacity)
		}
	}
	var old []string
	for rf, o := range s.objs {
		if o.elem == nil {
			old = append(old, s.addr(rf, o.ts))
		}
	}
	ts := s.ts + 1
	s.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	objs, cache := map[ref]*object{}, s.cache.Init()
	var writes []backend.Item
	place := func(rf ref, val []byte) {
		o := &object{ts: ts, order: ts}
		if rf.Dummy {
			o.tie = s.rng.Uint64()
		}
		objs[rf] = o
		if cache.Len() < s.opts.C {
			o.elem = cache.PushBack(&cached{ref: rf, val: val})
			return
		}
		a := s.addr(rf, ts)
		writes = append(writes, backend.Item{Addr: a, Value: s.seal(a, val)})
	}
	for _, k := range keys {
		place(ref{Key: k}, values[k])
	}
	for range s.capacity + s.opts.D - len(keys) {
		place(s.newDummy(), nil)
	}
	s.rng.Shuffle(len(writes), func(i, j int) { writes[i], writes[j] = writes[j], writes[i] })
	if err := s.writeChunks(ctx, writes); err != nil {
		s.restoreCache() // the old layout is still in force
		return 0, err
	}
	s.objs, s.ts, s.nReal = objs, ts, len(keys)
	s.rebuildReals()
	s.resetDummies()
	if err := s.deleteChunks(ctx, old); err != nil {
		s.counters.DeleteErrors++
	}
	return len(keys), nil
}

// restoreCache rebuilds the cache list from the objects (after a failed
// Load emptied it): dummies only, as the store was empty.
func (s *store) restoreCache() {
	s.cache.Init()
	for rf, o := range s.objs {
		if o.elem != nil {
			o.elem = s.cache.PushBack(&cached{ref: rf})
		}
	}
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
	st := state{B: s.opts.B, R: s.opts.R, FD: s.opts.FD, D: s.opts.D, C: s.opts.C,
		TS: s.ts, LastReset: s.lastReset, NextD: s.nextDummy, Counters: s.counters}
	for rf, o := range s.objs {
		st.Objects = append(st.Objects, objectState{Dummy: rf.Dummy, Key: rf.Key, TS: o.ts, Order: o.order, Tie: o.tie, Cached: o.elem != nil})
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
	o := s.opts
	if st.B != o.B || st.R != o.R || st.FD != o.FD || st.D != o.D || st.C != o.C {
		return fmt.Errorf("%w: the store was written with B=%d R=%d f_D=%d D=%d C=%d, the options ask for B=%d R=%d f_D=%d D=%d C=%d",
			kv.ErrMismatch, st.B, st.R, st.FD, st.D, st.C, o.B, o.R, o.FD, o.D, o.C)
	}
	s.ts, s.lastReset, s.nextDummy, s.counters = st.TS, st.LastReset, st.NextD, st.Counters
	for _, os := range st.Objects {
		s.objs[ref{Dummy: os.Dummy, Key: os.Key}] = &object{ts: os.TS, order: os.Order, tie: os.Tie}
		if !os.Dummy {
			s.nReal++
		}
	}
	for _, c := range st.Cache {
		rf := ref{Dummy: c.Dummy, Key: c.Key}
		obj := s.objs[rf]
		if obj == nil {
			return fmt.Errorf("%w: the saved cache names an unknown object", kv.ErrTampered)
		}
		obj.elem = s.cache.PushBack(&cached{ref: rf, val: c.Val})
	}
	var dummies []entry
	for rf, obj := range s.objs {
		if rf.Dummy && obj.elem == nil {
			dummies = append(dummies, entry{order: obj.order, tie: obj.tie, key: rf.Key})
		}
	}
	s.dummies.rebuild(dummies)
	s.rebuildReals()
	return sealedstate.Delete(ctx, s.b, stateAddr)
}
