package cloak

import (
	"bytes"
	"context"
	"fmt"

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
		s.touch(key)
		if v, ok := s.cache.get(key); ok {
			s.counters.CacheHits++
			s.mu.Unlock()
			return bytes.Clone(v.val), !v.absent, nil
		}
		e := s.pending[key]
		if e != nil {
			if v := e.latestWrite(); v != nil { // line 13: answered from the write
				s.counters.FromPendingWrite++
				s.mu.Unlock()
				return bytes.Clone(v.val), !v.absent, nil
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

// write applies a Put or Delete: the cache takes the value, any waiting
// reads are answered with it (Algorithm 2, line 18), and it is queued for
// the batch that next holds the key.
func (s *store) write(ctx context.Context, key string, v value) error {
	for {
		s.mu.Lock()
		wait, err := s.admitWrite(key, v)
		if wait == nil {
			s.mu.Unlock()
			return err
		}
		s.mu.Unlock()
		if err := s.await(ctx, wait); err != nil {
			return err
		}
	}
}

// admitWrite applies write v of key, or returns a channel to wait on when
// the pending map is full or no address is free.
func (s *store) admitWrite(key string, v value) (chan struct{}, error) {
	s.touch(key)
	exists := s.exists(key)
	if !exists && v.absent {
		return nil, nil // deleting a missing key changes nothing
	}
	e := s.pending[key]
	if e == nil {
		if wait := s.full(); wait != nil {
			return wait, nil
		}
	}
	if !exists {
		if s.live >= s.capacity {
			return nil, fmt.Errorf("%w: %d keys", kv.ErrFull, s.capacity)
		}
		if _, ok := s.where[key]; !ok {
			if len(s.free) == 0 {
				// Every spare address is held by a delete not yet written.
				s.counters.Backpressure++
				return s.committed, nil
			}
			s.reserve(key)
		}
	}
	switch {
	case exists && v.absent:
		s.live--
	case !exists:
		s.live++
	}
	if e == nil {
		e = s.newEntry(key)
	}
	e.write = &v
	for _, r := range e.reads {
		r <- result{val: v.val, found: !v.absent}
	}
	e.reads = nil
	s.cache.put(key, v)
	return nil, nil
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

// reserve gives a new key a free address; its first batch writes it.
func (s *store) reserve(key string) {
	a := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
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
	if s.opts.leak == leakEarlyWhenFull {
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
		return bytes.Clone(res.val), res.found, res.err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
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
