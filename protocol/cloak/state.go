package cloak

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
)

// state is a checkpoint of the proxy (internal/durable): the position
// map, the next batch id, the writes acknowledged but not yet on storage,
// and the batch to send again, if one failed. Each set's secret member
// order is not kept: a restored store draws a new one.
type state struct {
	Budgets  []int
	Next     uint64
	Clock    uint64
	Slots    []slotState
	Free     []uint32 // the free list, in its order (reserve takes the last)
	Pending  []pendingWrite
	Retry    *retryState
	Live     int
	Counters counters
}

type slotState struct {
	Key                 string
	Held                bool
	LastBatch, ClientTS uint64
}

type pendingWrite struct {
	Key    string
	Val    []byte
	Absent bool
}

// retryState is a batch whose backend calls failed, to be sent again
// unchanged: its addresses in order, its permutation and the writes it
// applies (by address).
type retryState struct {
	ID    uint64
	Real  int
	Addrs []uint32
	Perm  []int
	Sent  []sentWrite
}

type sentWrite struct {
	Addr   uint32
	Val    []byte
	Absent bool
}

// layout writes a new layout of items (Sec. 5.1, base case): a random
// bijection of the sum_d d*b_d physical addresses onto the sets, set d
// holding beta - sum_{i<d} b_i addresses, and of the items onto the
// addresses. The sets are written oldest first, one backend Write each,
// as if by the D batches before the next one, whose ids they take: the
// storage operator sees the sets form as batches would form them. Each
// Write lists its addresses in address order, so it shows nothing of the
// members' random order, by which dummies are chosen (takeDummies). The
// layout replaces the proxy's state only once every write succeeded.
func (s *store) layout(ctx context.Context, items []cacheEntry) error {
	size := make([]int, len(s.budgets)) // size[d-1] = beta - sum_{i<d} b_i
	m, left := 0, sum(s.budgets)
	for d, b := range s.budgets {
		size[d], left = left, left-b
		m += size[d]
	}
	order := make([]uint32, m)
	for i := range order {
		order[i] = uint32(i)
	}
	s.rng.Shuffle(m, func(i, j int) { order[i], order[j] = order[j], order[i] })
	slots, vals, where, sets := make([]slot, m), make([]value, m), make(map[string]uint32, len(items)), map[uint64][]uint32{}
	for i := range vals {
		vals[i].absent = true
	}
	// An independent permutation places the items, so that which set an
	// item starts in does not follow its place in the load.
	place := s.rng.Perm(m)
	for i, it := range items {
		a := order[place[i]]
		slots[a] = slot{key: it.key, held: true}
		vals[a] = it.v
		where[it.key] = a
	}
	base, depth := s.next, uint64(len(s.budgets)) // set d takes id base+depth-d
	start := 0
	for d := len(s.budgets); d >= 1; d-- {
		set, id := order[start:start+size[d-1]], base+depth-uint64(d)
		start += size[d-1]
		sets[id] = set
		batch, plain := make([]backend.Item, 0, len(set)), make([]byte, 4+s.valueSize)
		for _, a := range slices.Sorted(slices.Values(set)) {
			slots[a].lastBatch = id
			batch = append(batch, backend.Item{Addr: addr(a), Value: s.sealElement(a, id, vals[a], plain)})
		}
		if err := s.b.Write(ctx, batch); err != nil {
			return fmt.Errorf("cloak: writing the layout: %w", err)
		}
	}
	s.slots, s.where, s.sets, s.next, s.live = slots, where, sets, base+depth, len(items)
	s.free = s.free[:0]
	for a := range slots {
		if !slots[a].held {
			s.free = append(s.free, uint32(a))
		}
	}
	s.pending, s.queues, s.retry = map[string]*entry{}, map[uint64][]string{}, nil
	s.cache.reset()
	return nil
}

// Load implements kv.Loader: the items replace the empty store's layout
// with a new random layout (later duplicates of a key win). A journal
// record announces the load before its first write: a load cut short by a
// crash leaves storage matching no state, and recovery writes an empty
// layout afresh (nothing was acknowledged). The loaded state is
// checkpointed before Load returns. A layout write that fails stops the
// store; reopened, it is empty.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return 0, s.broken
	}
	if s.live > 0 || len(s.pending) > 0 {
		return 0, kv.ErrNotEmpty
	}
	var loaded []cacheEntry
	at := map[string]int{}
	for k, v := range items {
		if len(v) > s.valueSize {
			return 0, fmt.Errorf("%w: %d bytes for key %q, the store holds %d", kv.ErrValueTooLarge, len(v), k, s.valueSize)
		}
		ce := cacheEntry{key: k, v: value{val: append([]byte(nil), v...)}}
		if i, ok := at[k]; ok {
			loaded[i] = ce
			continue
		}
		if len(loaded) == s.capacity {
			return 0, fmt.Errorf("%w: more than %d keys", kv.ErrFull, s.capacity)
		}
		at[k] = len(loaded)
		loaded = append(loaded, ce)
	}
	if _, err := s.log.Commit([]byte{recLoad}); err != nil {
		s.broken = fmt.Errorf("cloak: store stopped: %w", err)
		return 0, s.broken
	}
	if err := s.layout(ctx, loaded); err != nil {
		s.broken = fmt.Errorf("cloak: bulk load failed, storage matches no state; reopen the store to find it empty: %w", err)
		return 0, s.broken
	}
	if err := s.checkpoint(ctx); err != nil {
		s.broken = fmt.Errorf("cloak: bulk load not checkpointed; reopen the store to find it empty: %w", err)
		return 0, s.broken
	}
	return len(loaded), nil
}

// Close stops the batches, checkpoints the proxy state (with the writes
// acknowledged but not yet on storage, and a failed batch to send again)
// and closes the backend. The caller (kv) guarantees no request is in
// flight.
func (s *store) Close() error {
	close(s.stop)
	s.started.Do(func() { close(s.loopDone) }) // never started: nothing to wait for
	<-s.loopDone
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.broken
	if err == nil {
		if err = s.checkpoint(context.Background()); err != nil {
			err = fmt.Errorf("cloak: closing without a checkpoint; the next open replays the journal: %w", err)
		}
	}
	return errors.Join(err, s.b.Close())
}

func first(b []int) int {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// JournalsEveryWrite implements kv.WriteJournaler: every write-back is
// journaled before it is issued, and every layout write is followed by a
// checkpoint, which syncs storage.
func (s *store) JournalsEveryWrite() bool { return s.log.Durable() }

func (s *store) Stats() kv.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counters
	util := 0.0
	if c.Batches > 0 {
		util = float64(c.RealQueries) / float64(c.Batches*uint64(s.opts.Beta))
	}
	return kv.Stats{Keys: int64(s.live), Extra: []kv.Stat{
		{Name: kv.StatBeta, Value: float64(s.opts.Beta)},
		{Name: kv.StatSets, Value: float64(len(s.budgets))},
		{Name: kv.StatB1, Value: float64(s.opts.B1)},
		{Name: kv.StatZipfS, Value: s.opts.S},
		{Name: kv.StatDeltaMs, Value: float64(s.opts.Delta.Microseconds()) / 1000},
		{Name: kv.StatAddresses, Value: float64(len(s.slots))},
		{Name: kv.StatBatches, Value: float64(c.Batches)},
		{Name: kv.StatBatchUtilisation, Value: util},
		{Name: kv.StatRealQueries, Value: float64(c.RealQueries)},
		{Name: kv.StatDummyQueries, Value: float64(c.DummyQueries)},
		{Name: kv.StatCacheHits, Value: float64(c.CacheHits)},
		{Name: kv.StatCoalescedReads, Value: float64(c.Coalesced)},
		{Name: kv.StatReadsFromPendingWrites, Value: float64(c.FromPendingWrite)},
		{Name: kv.StatPendingKeys, Value: float64(len(s.pending))},
		{Name: kv.StatBackpressureWaits, Value: float64(c.Backpressure)},
		{Name: kv.StatBatchErrors, Value: float64(c.FailedBatches)},
		{Name: kv.StatCheckpointErrors, Value: float64(c.FailedCheckpoints)},
		{Name: kv.StatTicks, Value: float64(s.ticks.Load())},
	}}
}

// StoredKeys implements kv.KeyLister from the bijection, which names
// every key with an address (a new key reserves one at its first write),
// less those whose latest write, still waiting for a batch, deletes them.
func (s *store) StoredKeys(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, s.live)
	for key := range s.where {
		if s.exists(key) {
			keys = append(keys, key)
		}
	}
	return keys, nil
}
