package cloak

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
)

// The client side of the proxy: Algorithm 1 (GetClientQueries) and the
// intake half of Algorithm 2 (ProcessBatches, lines 4-21), one critical
// section per request. Writes are acknowledged at once; reads are answered
// from the cache, from a pending write, or by the next batch that holds
// the key.

func (s *store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	for {
		s.mu.Lock()
		if s.broken != nil {
			s.mu.Unlock()
			return nil, false, s.broken
		}
		s.touch(key)
		if v, ok := s.cache.get(key); ok {
			s.counters.CacheHits++
			s.mu.Unlock()
			return s.reply(result{val: v.val, found: !v.absent, lsn: v.lsn})
		}
		e := s.pending[key]
		if e != nil {
			if v := e.latestWrite(); v != nil { // line 13: answered from the write
				s.counters.FromPendingWrite++
				s.mu.Unlock()
				return s.reply(result{val: v.val, found: !v.absent, lsn: v.lsn})
			}
			s.counters.Coalesced++ // line 16: one physical read answers all
			return s.wait(ctx, e.addRead())
		}
		if _, ok := s.where[key]; !ok {
			s.mu.Unlock()
			return nil, false, nil
		}
		if wait := s.full(); wait != nil {
			s.mu.Unlock()
			if err := s.await(ctx, wait); err != nil {
				return nil, false, err
			}
			continue
		}
		return s.wait(ctx, s.newEntry(key).addRead())
	}
}

func (s *store) Put(ctx context.Context, key string, val []byte) error {
	return s.write(ctx, key, value{val: append([]byte(nil), val...)})
}

func (s *store) Delete(ctx context.Context, key string) error {
	return s.write(ctx, key, value{absent: true})
}

// write applies a Put or Delete: it is journaled, the cache takes the
// value, any waiting reads are answered with it (Algorithm 2, line 18),
// and it is queued for the batch that next holds the key. It returns once
// its journal record is durable (group-committed with the other clients'
// writes), so an acknowledged write survives a crash.
func (s *store) write(ctx context.Context, key string, v value) error {
	for {
		s.mu.Lock()
		if s.broken != nil {
			s.mu.Unlock()
			return s.broken
		}
		wait, lsn, err := s.admitWrite(key, v)
		s.mu.Unlock()
		if wait == nil {
			// Even a write that changed nothing, or found the store full,
			// waits for the writes it judged by.
			if serr := s.syncTo(lsn); serr != nil {
				return serr
			}
			return err
		}
		if err := s.await(ctx, wait); err != nil {
			return err
		}
	}
}

// admitWrite applies write v of key and returns the journal record to
// wait for, or returns a channel to wait on when the pending map is full
// or no address is free.
func (s *store) admitWrite(key string, v value) (chan struct{}, uint64, error) {
	s.touch(key)
	exists := s.exists(key)
	if !exists && v.absent {
		return nil, s.latestLSN(key), nil // deleting a missing key changes nothing
	}
	e := s.pending[key]
	if e == nil {
		if wait := s.full(); wait != nil {
			return wait, 0, nil
		}
	}
	reserve, a := false, uint32(0)
	if !exists {
		if s.live >= s.capacity {
			return nil, s.log.Last(), fmt.Errorf("%w: %d keys", kv.ErrFull, s.capacity)
		}
		if _, ok := s.where[key]; !ok {
			if len(s.free) == 0 {
				// Every spare address is held by a delete not yet written.
				s.counters.Backpressure++
				return s.committed, 0, nil
			}
			reserve, a = true, s.free[len(s.free)-1]
		}
	}
	v.lsn = s.journalWrite(key, v, reserve, a)
	e = s.apply(key, v, reserve, a)
	for _, r := range e.reads {
		r <- result{val: v.val, found: !v.absent, lsn: v.lsn}
	}
	e.reads = nil
	s.cache.put(key, v)
	return nil, v.lsn, nil
}

// apply enters write v of key in the pending map, first giving a new key
// free address a when reserve is set; admitWrite has checked it may, and
// replay applies a journaled write the same way.
func (s *store) apply(key string, v value, reserve bool, a uint32) *entry {
	exists := s.exists(key)
	if reserve {
		s.reserve(key, a)
	}
	switch {
	case exists && v.absent:
		s.live--
	case !exists:
		s.live++
	}
	e := s.pending[key]
	if e == nil {
		e = s.newEntry(key)
	}
	e.write = &v
	return e
}

// latestLSN returns the journal record of key's latest write not yet on
// storage (0 if none).
func (s *store) latestLSN(key string) uint64 {
	if e := s.pending[key]; e != nil {
		if v := e.latestWrite(); v != nil {
			return v.lsn
		}
	}
	return 0
}

// exists reports whether key exists, counting writes not yet on storage.
func (s *store) exists(key string) bool {
	if e := s.pending[key]; e != nil {
		if v := e.latestWrite(); v != nil {
			return !v.absent
		}
	}
	_, ok := s.where[key]
	return ok
}

// reserve gives a new key free address a (the last of the free list,
// unless replay finds otherwise); its first batch writes it.
func (s *store) reserve(key string, a uint32) {
	if n := len(s.free) - 1; n >= 0 && s.free[n] == a {
		s.free = s.free[:n]
	} else if i := slices.Index(s.free, a); i >= 0 {
		s.free = slices.Delete(s.free, i, i+1)
	}
	s.slots[a].key, s.slots[a].held = key, true
	s.where[key] = a
}

// touch records a client access of key for the dummy choice (Sec. 4.2).
func (s *store) touch(key string) {
	s.clock++
	if a, ok := s.where[key]; ok {
		s.slots[a].clientTS = s.clock
	}
}

// full returns a channel to wait on when the pending map is at its bound
// (Algorithm 2, lines 20-21), nil otherwise.
func (s *store) full() chan struct{} {
	if len(s.pending) < s.opts.Pending {
		return nil
	}
	if s.opts.TestingKnobs.Leak == leakEarlyWhenFull {
		s.askEarly()
	}
	s.counters.Backpressure++
	return s.committed
}

// newEntry enters key, which has an address, in the pending map and, unless
// its address is in the batch in flight, in the queue of its set
// (Algorithm 2, lines 8-11).
func (s *store) newEntry(key string) *entry {
	e := &entry{}
	s.pending[key] = e
	if s.slots[s.where[key]].inflight {
		e.inflight = true
	} else {
		s.enqueue(key)
	}
	return e
}

func (s *store) enqueue(key string) {
	id := s.slots[s.where[key]].lastBatch
	s.queues[id] = append(s.queues[id], key)
}

func (e *entry) latestWrite() *value {
	if e.write != nil {
		return e.write
	}
	return e.sent
}

// addRead adds a read to be answered by the next write of the key or the
// next batch that reads its address (the one in flight, if any).
func (e *entry) addRead() chan result {
	r := make(chan result, 1)
	e.reads = append(e.reads, r)
	return r
}

// wait releases mu and waits for r. A read already queued is served even
// if its caller gives up.
func (s *store) wait(ctx context.Context, r chan result) ([]byte, bool, error) {
	s.mu.Unlock()
	select {
	case res := <-r:
		return s.reply(res)
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// reply answers a read with res once the write it shows, if any, is
// durable.
func (s *store) reply(res result) ([]byte, bool, error) {
	if res.err != nil {
		return nil, false, res.err
	}
	if err := s.syncTo(res.lsn); err != nil {
		return nil, false, err
	}
	return bytes.Clone(res.val), res.found, nil
}

// syncTo waits until journal record lsn is durable (0: nothing to wait
// for). A journal that fails stops the store: what it holds in memory can
// no longer be made durable.
func (s *store) syncTo(lsn uint64) error {
	if lsn == 0 {
		return nil
	}
	err := s.log.Sync(lsn)
	if err != nil {
		s.mu.Lock()
		s.halt(err)
		err = s.broken
		s.mu.Unlock()
	}
	return err
}

// halt stops the store after a journal failure or tampered storage: no
// batch runs after it, so the reads waiting for one are answered with the
// error, and the requests waiting for a batch to commit are woken to see
// the store stopped; s.mu is held.
func (s *store) halt(err error) {
	if s.broken != nil {
		return
	}
	s.broken = fmt.Errorf("cloak: store stopped: %w", err)
	for _, e := range s.pending {
		for _, r := range e.reads {
			r <- result{err: s.broken}
		}
		e.reads = nil
	}
	close(s.committed)
	s.committed = make(chan struct{})
}

func (s *store) await(ctx context.Context, c chan struct{}) error {
	select {
	case <-c:
		return nil
	case <-s.stop:
		return kv.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}
