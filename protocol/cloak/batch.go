package cloak

import (
	"context"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/backend"
)

// batch is one batch of Algorithm 2 (lines 22-35): exactly b_d addresses
// from every set d, read in one backend Read and written back, re-encrypted
// and permuted, in one backend Write.
type batch struct {
	id    uint64
	addrs []uint32         // set by set, most recent set first
	from  []uint64         // the batch that last wrote each address
	perm  []int            // the element read from addrs[i] goes to addrs[perm[i]]
	sent  map[uint32]value // the writes it applies, by address read
	real  int              // addresses read for a client's request
}

// runBatch forms, sends and commits one batch. A batch whose backend calls
// fail is kept and sent again at the next tick, so no write is lost and
// storage sees the same batch again; the reads waiting on it are failed.
func (s *store) runBatch(ctx context.Context) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	s.mu.Lock()
	b, err := s.retry, error(nil)
	if b == nil {
		b, err = s.choose()
	}
	s.mu.Unlock()
	var elems []value
	if err == nil {
		elems, err = s.exchange(ctx, b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.fail(b, err)
		return
	}
	s.retry = nil
	s.commit(b, elems)
}

// choose forms the next batch (Algorithm 2, lines 22-29): from every set
// d, the first b_d keys waiting in its queue, then dummies, preferring the
// addresses clients asked for most recently (Sec. 4.2). An address chosen
// as a dummy whose key has requests waiting serves them too.
func (s *store) choose() (*batch, error) {
	b := &batch{id: s.next, sent: map[uint32]value{}}
	for d, budget := range s.budgets {
		set := b.id - uint64(d+1)
		q, n := s.queues[set], 0
		for ; n < len(q) && n < budget; n++ {
			s.take(b, s.where[q[n]])
		}
		if err := s.takeDummies(b, s.sets[set], budget-n); err != nil {
			return nil, fmt.Errorf("cloak: internal error: set %d (reuse distance %d): %w", set, d+1, err)
		}
		rest := slices.DeleteFunc(q[n:], func(k string) bool { return s.slots[s.where[k]].inflight })
		if len(rest) > 0 {
			s.queues[set] = rest
		} else {
			delete(s.queues, set)
		}
	}
	b.perm = s.rng.Perm(len(b.addrs))
	return b, nil
}

// take adds address a to batch b and hands it the requests waiting on its
// key.
func (s *store) take(b *batch, a uint32) {
	sl := &s.slots[a]
	sl.inflight = true
	b.addrs, b.from = append(b.addrs, a), append(b.from, sl.lastBatch)
	if !sl.held {
		return
	}
	e := s.pending[sl.key]
	if e == nil {
		return
	}
	b.real++
	e.inflight = true
	e.waiters, e.reads = append(e.waiters, e.reads...), nil
	if e.write != nil {
		e.sent, e.write = e.write, nil
		b.sent[a] = *e.sent
	}
}

// takeDummies adds k addresses of set members not yet in b, those whose
// keys clients asked for most recently first. Addresses within a set are
// indistinguishable to storage, so the choice hides nothing and only
// raises the chance that a later request finds its key in a recent set
// (Sec. 4.2).
func (s *store) takeDummies(b *batch, members []uint32, k int) error {
	var cand []uint32
	for _, a := range members {
		if !s.slots[a].inflight {
			cand = append(cand, a)
		}
	}
	if k > len(cand) {
		return fmt.Errorf("%d addresses left for a budget of %d", len(cand), k)
	}
	if k < len(cand) {
		slices.SortStableFunc(cand, func(x, y uint32) int {
			return -cmpUint64(s.slots[x].clientTS, s.slots[y].clientTS)
		})
	}
	for _, a := range cand[:k] {
		s.take(b, a)
	}
	return nil
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// exchange reads the batch's addresses, applies its writes, and writes
// the elements back re-encrypted under the batch id, permuted. It returns
// the element read from each address, after the writes.
func (s *store) exchange(ctx context.Context, b *batch) ([]value, error) {
	addrs := make([]string, len(b.addrs))
	for i, a := range b.addrs {
		addrs[i] = addr(a)
	}
	sealed, err := s.b.Read(ctx, addrs)
	if err != nil {
		return nil, err
	}
	elems := make([]value, len(b.addrs))
	for i, a := range b.addrs {
		if elems[i], err = s.openElement(a, b.from[i], sealed[i]); err != nil {
			return nil, err
		}
		if v, ok := b.sent[a]; ok {
			elems[i] = v
		}
	}
	items := make([]backend.Item, len(b.addrs))
	for i, p := range b.perm {
		to := b.addrs[p]
		items[p] = backend.Item{Addr: addr(to), Value: s.sealElement(to, b.id, elems[i])}
	}
	return elems, s.b.Write(ctx, items)
}

// fail keeps a batch whose backend calls failed for the next tick and
// answers the reads waiting on it with the error.
func (s *store) fail(b *batch, err error) {
	s.counters.FailedBatches++
	if b == nil {
		return // choose failed: nothing was taken
	}
	s.retry = b
	for _, a := range b.addrs {
		if sl := s.slots[a]; sl.held {
			if e := s.pending[sl.key]; e != nil {
				for _, w := range e.waiters {
					w <- result{err: err}
				}
				e.waiters = nil
			}
		}
	}
}

// commit applies a batch that storage took (Algorithm 2, lines 30-35):
// every element moves to its new address, which joins the newest set;
// waiting reads are answered; keys written again meanwhile are queued for
// their new set; deleted keys free their address.
func (s *store) commit(b *batch, elems []value) {
	old := make([]slot, len(b.addrs))
	for i, a := range b.addrs {
		old[i] = s.slots[a]
	}
	inBatch := make(map[uint32]bool, len(b.addrs))
	newSet := make([]uint32, len(b.addrs))
	var requeue []string
	for i, sl := range old {
		to := b.addrs[b.perm[i]]
		inBatch[to] = true
		newSet[b.perm[i]] = to
		sl.lastBatch, sl.inflight = b.id, false
		if sl.held {
			if e := s.pending[sl.key]; e != nil && e.inflight {
				if s.settle(sl.key, e, elems[i]) {
					requeue = append(requeue, sl.key)
				}
			}
			if s.freed(sl.key, elems[i]) {
				delete(s.where, sl.key)
				sl.key, sl.held = "", false
			} else {
				s.where[sl.key] = to
			}
		}
		s.slots[to] = sl
	}
	s.free = slices.DeleteFunc(s.free, func(a uint32) bool { return inBatch[a] })
	for _, a := range newSet {
		if !s.slots[a].held {
			s.free = append(s.free, a)
		}
	}
	for d := range s.budgets {
		set := b.id - uint64(d+1)
		if rest := slices.DeleteFunc(s.sets[set], func(a uint32) bool { return inBatch[a] }); len(rest) > 0 {
			s.sets[set] = rest
		} else {
			delete(s.sets, set)
		}
	}
	s.sets[b.id] = newSet
	for _, k := range requeue {
		s.enqueue(k)
	}
	s.next = b.id + 1
	s.counters.Batches++
	s.counters.RealQueries += uint64(b.real)
	s.counters.DummyQueries += uint64(len(b.addrs) - b.real)
	close(s.committed)
	s.committed = make(chan struct{})
}

// settle answers the reads of key waiting on the batch with its element
// v and reports whether the key was written again meanwhile (and so goes
// to the queue of its new set).
func (s *store) settle(key string, e *entry, v value) bool {
	for _, w := range e.waiters {
		w <- result{val: v.val, found: !v.absent}
	}
	e.waiters, e.sent, e.inflight = nil, nil, false
	if e.write != nil || len(e.reads) > 0 {
		return true
	}
	delete(s.pending, key)
	s.cache.put(key, v)
	return false
}

// freed reports whether key's address is free after the batch: its
// element is a delete and no write of the key is waiting.
func (s *store) freed(key string, v value) bool {
	if !v.absent {
		return false
	}
	e := s.pending[key]
	return e == nil || e.write == nil
}
