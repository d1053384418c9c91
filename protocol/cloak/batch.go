package cloak

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
)

// batch is one batch of Algorithm 2 (lines 22-35): exactly b_d addresses
// from every set d, read in one backend Read and written back, re-encrypted
// and permuted, in one backend Write.
type batch struct {
	id    uint64
	addrs []uint32         // in a random order
	from  []uint64         // the batch that last wrote each address
	perm  []int            // the element read from addrs[i] goes to addrs[perm[i]]
	sent  map[uint32]value // the writes it applies, by address read
	real  int              // addresses read for a client's request
	trace *batchTrace      // tests only: what TestingKnobs.Trace receives (trace.go)
}

// runBatch forms, sends and commits one batch. The reads waiting on it are
// answered as soon as its elements are read, before the write-back, as in
// Sec. 4.1 ("upon receiving the response, it replies to any pending
// client"). A batch whose backend calls fail is kept and sent again at the
// next tick, so no write is lost and storage sees the same batch again;
// the reads still waiting on it are failed.
//
// A new batch is journaled, and its record made durable, before its Read:
// after a crash the recovered proxy sends it again unchanged (never a new
// choice of the same sets, whose real queries storage could find as the
// addresses both Reads share), and its commit is journaled after its
// Write. Every checkpointEvery batches a checkpoint follows the commit.
func (s *store) runBatch(ctx context.Context) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	s.mu.Lock()
	if s.broken != nil {
		s.mu.Unlock()
		return
	}
	b, err := s.retry, error(nil)
	again := b != nil
	var lsn uint64
	if !again {
		if b, err = s.choose(); err == nil {
			lsn = s.journalBatch(b)
		}
	}
	s.mu.Unlock()
	if lsn > 0 {
		if serr := s.log.Sync(lsn); serr != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.halt(serr)
			s.fail(b, s.broken)
			return
		}
	}
	var elems []value
	written := false
	if err == nil {
		elems, written, err = s.fetch(ctx, b, again)
	}
	if err == nil {
		s.mu.Lock()
		s.answer(b, elems)
		s.mu.Unlock()
		if !written {
			err = s.writeBack(ctx, b, elems)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(err, kv.ErrTampered) {
		// Storage served an element that does not open under its
		// address and batch: sending the batch again reads it again.
		// The store stops, so every request learns of the tampering,
		// those its cache or pending writes would answer included.
		s.halt(err)
	}
	if err != nil {
		s.fail(b, err)
		return
	}
	s.retry = nil
	s.journalCommit(b, elems)
	s.commit(b, elems)
	if b.trace != nil {
		s.opts.TestingKnobs.Trace(*b.trace)
	}
	s.sinceCheckpoint++
	due := s.log.Durable() && s.sinceCheckpoint >= s.checkpointEvery
	if s.opts.TestingKnobs.Leak == leakCheckpointByRecords {
		due = s.log.Due()
	}
	if due {
		// A checkpoint that fails (storage unreachable) is tried again
		// after the next batch; the journal keeps everything meanwhile.
		if err := s.checkpoint(ctx); err != nil {
			s.counters.FailedCheckpoints++
		}
	}
}

// choose forms the next batch (Algorithm 2, lines 22-29): from every set
// d, the first b_d keys waiting in its queue, then dummies, preferring the
// addresses clients asked for most recently (Sec. 4.2). An address chosen
// as a dummy whose key has requests waiting serves them too. The batch
// lists its addresses in a random order, so that where an address sits in
// the Read (and in the Write, which follows the Read's order) carries
// nothing: not its set, nor whether it is a real query, which choose takes
// before the dummies.
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
		if s.opts.TestingKnobs.Leak == leakDrainQueue {
			s.drain(b, q[n:])
		}
		rest := slices.DeleteFunc(q[n:], func(k string) bool { return s.slots[s.where[k]].inflight })
		if len(rest) > 0 {
			s.queues[set] = rest
		} else {
			delete(s.queues, set)
		}
	}
	order := s.readOrder(b.addrs)
	b.addrs, b.from = reorder(b.addrs, order), reorder(b.from, order)
	b.perm = s.writeOrder(b.addrs, order)
	if s.opts.TestingKnobs.Trace != nil {
		b.trace = s.traceOf(b, order)
	}
	return b, nil
}

// readOrder is the order of the batch's Read: order[j] is the place, in
// the order choose took them, of the j-th address the Read lists. It is a
// fresh random permutation (Cloak Sec. 5.1 needs the batch's addresses
// indistinguishable but for their sets), so a key's place in the Read is
// uniform over the batch and independent of its place at every other
// access.
func (s *store) readOrder(taken []uint32) []int {
	if s.opts.TestingKnobs.Leak == leakKeyedReadOrder {
		return s.byKeyedHash(taken)
	}
	return s.rng.Perm(len(taken))
}

// writeOrder is the batch's write-back permutation (Cloak Sec. 4.1,
// StorageReadWrite (iii)): the element read from addrs[i] is written to
// addrs[perm[i]], the perm[i]-th address of the Write. A fresh random
// permutation: where a key's element lands is uniform over the batch,
// independent of its place in the Read, of its place at every other
// access and of the order choose took the batch's addresses in (order,
// as readOrder gives it).
func (s *store) writeOrder(addrs []uint32, order []int) []int {
	switch s.opts.TestingKnobs.Leak {
	case leakWriteBackInPlace:
		return inPlace(len(addrs))
	case leakKeyedWriteBack:
		return rankOf(s.byKeyedHash(addrs))
	case leakRealsInTakeOrder:
		return s.realsInTakeOrder(addrs, order)
	}
	return s.rng.Perm(len(addrs))
}

// reorder returns xs listed in order: its j-th element is xs[order[j]].
func reorder[T any](xs []T, order []int) []T {
	out := make([]T, len(xs))
	for j, i := range order {
		out[j] = xs[i]
	}
	return out
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
	if e.write != nil {
		e.sent, e.write = e.write, nil
		b.sent[a] = *e.sent
	}
}

// takeDummies adds k addresses of set members not yet in b, those whose
// keys clients asked for most recently first, ties broken by the members'
// order, which is secret and random (commit). Addresses within a set are
// indistinguishable to storage, so the choice hides nothing and only
// raises the chance that a later request finds its key in a recent set
// (Sec. 4.2). Breaking ties by an order storage knows would not: the many
// addresses no client asked for tie, and dummies taken in storage's order
// would be the set's first unread addresses, telling storage which of the
// set's reads were real (Cloak Sec. 4.2 draws dummies at random; Sec. 5.1
// needs every equal-size subset of a set equally likely).
func (s *store) takeDummies(b *batch, members []uint32, k int) error {
	cand := s.scratch[:0]
	for _, a := range members {
		if !s.slots[a].inflight {
			cand = append(cand, a)
		}
	}
	s.scratch = cand
	if k > len(cand) {
		if s.opts.TestingKnobs.Leak != leakDrainQueue {
			return fmt.Errorf("%d addresses left for a budget of %d", len(cand), k)
		}
		k = len(cand) // a set drained before runs short
	}
	s.mostRecent(cand, k)
	for _, a := range cand[:k] {
		s.take(b, a)
	}
	return nil
}

// mostRecent moves the k addresses of cand whose keys clients asked for
// most recently to its front, in any order (quickselect with a three-way
// partition, so the many equal timestamps of addresses no client asked
// for cost one pass: linear on average, where sorting every set each batch
// would cost O(M log M)).
func (s *store) mostRecent(cand []uint32, k int) {
	ts := func(i int) uint64 { return s.slots[cand[i]].clientTS }
	lo, hi := 0, len(cand)
	for lo < k && k < hi {
		pivot := ts(lo + s.rng.IntN(hi-lo))
		// cand[lo:gt] > pivot, cand[gt:i] == pivot, cand[lt:hi] < pivot.
		gt, i, lt := lo, lo, hi
		for i < lt {
			switch t := ts(i); {
			case t > pivot:
				cand[gt], cand[i] = cand[i], cand[gt]
				gt, i = gt+1, i+1
			case t < pivot:
				lt--
				cand[i], cand[lt] = cand[lt], cand[i]
			default:
				i++
			}
		}
		switch {
		case k < gt:
			hi = gt
		case k > lt:
			lo = lt
		default:
			return // the k-th falls among the equal ones
		}
	}
}

// fetch reads the batch's addresses and returns the element of each,
// with the batch's writes applied. A batch sent again may find its own
// write-back on storage: a Write reported as failed that took effect (a
// timeout after Redis applied it, say). It then returns the elements that
// write-back holds and written = true, so the batch commits without
// writing again.
func (s *store) fetch(ctx context.Context, b *batch, again bool) (elems []value, written bool, err error) {
	addrs := make([]string, len(b.addrs))
	for i, a := range b.addrs {
		addrs[i] = addr(a)
	}
	sealed, err := s.b.Read(ctx, addrs)
	if err != nil {
		return nil, false, err
	}
	if elems, err = s.openRead(b, sealed); err != nil && again {
		if elems, lerr := s.openWritten(b, sealed); lerr == nil {
			return elems, true, nil
		}
	}
	return elems, false, err
}

// openRead opens the elements as the batch found them and applies its
// writes.
func (s *store) openRead(b *batch, sealed [][]byte) ([]value, error) {
	elems := make([]value, len(b.addrs))
	for i, a := range b.addrs {
		var err error
		if elems[i], err = s.openElement(a, b.from[i], sealed[i]); err != nil {
			return nil, err
		}
		if v, ok := b.sent[a]; ok {
			elems[i] = v
		}
	}
	return elems, nil
}

// openWritten opens the elements as the batch's write-back left them:
// element i sealed under the batch id at addrs[perm[i]].
func (s *store) openWritten(b *batch, sealed [][]byte) ([]value, error) {
	elems := make([]value, len(b.addrs))
	for i, p := range b.perm {
		var err error
		if elems[i], err = s.openElement(b.addrs[p], b.id, sealed[p]); err != nil {
			return nil, err
		}
	}
	return elems, nil
}

// answer gives the reads waiting on the batch their key's element. The
// element becomes the entry's sent value, so a read arriving before the
// batch commits is answered from it at once (Algorithm 2, line 13).
func (s *store) answer(b *batch, elems []value) {
	for i, a := range b.addrs {
		sl := s.slots[a]
		if !sl.held {
			continue
		}
		if e := s.pending[sl.key]; e != nil && e.inflight {
			v := elems[i]
			for _, r := range e.reads {
				r <- result{val: v.val, found: !v.absent}
			}
			e.reads, e.sent = nil, &v
		}
	}
}

// writeBack writes the batch's elements back re-encrypted under the batch
// id, permuted, once the journal holds the Write: storage need not sync
// it (backend.DeferSync), since recovery issues it again.
func (s *store) writeBack(ctx context.Context, b *batch, elems []value) error {
	items, plain := make([]backend.Item, len(b.addrs)), make([]byte, 4+s.valueSize)
	for i, p := range b.perm {
		to := b.addrs[p]
		items[p] = backend.Item{Addr: addr(to), Value: s.sealElement(to, b.id, elems[i], plain)}
	}
	if err := s.journalWriteBack(b, items); err != nil {
		s.mu.Lock()
		s.halt(err)
		err = s.broken
		s.mu.Unlock()
		return err
	}
	return s.b.Write(ctx, items)
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
				for _, r := range e.reads {
					r <- result{err: err}
				}
				e.reads = nil
			}
		}
	}
}

// commit applies a batch that storage took (Algorithm 2, lines 30-35):
// every element moves to its new address, which joins the newest set;
// keys written again meanwhile are queued for
// their new set; deleted keys free their address.
func (s *store) commit(b *batch, elems []value) {
	old := make([]slot, len(b.addrs))
	for i, a := range b.addrs {
		old[i] = s.slots[a]
	}
	var requeue []string
	for i, sl := range old {
		to := b.addrs[b.perm[i]]
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
	// The batch's addresses now carry its id: that drops them from their
	// old sets and from the free list.
	moved := func(a uint32) bool { return s.slots[a].lastBatch == b.id }
	s.free = slices.DeleteFunc(s.free, moved)
	for _, a := range b.addrs {
		if !s.slots[a].held {
			s.free = append(s.free, a)
		}
	}
	for d := range s.budgets {
		set := b.id - uint64(d+1)
		if rest := slices.DeleteFunc(s.sets[set], moved); len(rest) > 0 {
			s.sets[set] = rest
		} else {
			delete(s.sets, set)
		}
	}
	s.sets[b.id] = s.secretOrder(b.addrs)
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

// settle ends key's part in the committed batch, whose element for it is
// v, and reports whether the key was written again meanwhile (and so goes
// to the queue of its new set). The reads answered here are those that
// asked for the key after the batch was read, while its address was in
// flight.
func (s *store) settle(key string, e *entry, v value) bool {
	for _, r := range e.reads {
		r <- result{val: v.val, found: !v.absent}
	}
	e.reads, e.sent, e.inflight = nil, nil, false
	if e.write != nil {
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

// secretOrder returns the members of a new set in a random order of the
// proxy's own, independent of the order of the Write that made the set:
// takeDummies breaks ties by it.
func (s *store) secretOrder(addrs []uint32) []uint32 {
	members := slices.Clone(addrs)
	if s.opts.TestingKnobs.Leak == leakPublicTieOrder {
		return members
	}
	s.rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return members
}
