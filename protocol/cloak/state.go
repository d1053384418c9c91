package cloak

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/sealedstate"
	"github.com/oblivkv/oblivkv/kv"
)

// stateAddr holds the sealed proxy state between a clean Close and the
// next open.
const stateAddr = "ck/state"

// state is what the proxy keeps between runs: the position map, the next
// batch id, and the writes acknowledged but not yet on storage.
type state struct {
	Budgets  []int
	Next     uint64
	Slots    []slotState
	Pending  []pendingWrite
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
// with a new random layout (later duplicates of a key win).
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
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
	if err := s.layout(ctx, loaded); err != nil {
		return 0, err
	}
	return len(loaded), nil
}

// Close stops the batches, saves the proxy state sealed and closes the
// backend. The caller (kv) guarantees no request is in flight; writes
// acknowledged but not yet on storage are in the saved state.
func (s *store) Close() error {
	close(s.stop)
	<-s.loopDone
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := state{Budgets: s.budgets, Next: s.next, Live: s.live, Counters: s.counters}
	for _, sl := range s.slots {
		st.Slots = append(st.Slots, slotState{Key: sl.key, Held: sl.held, LastBatch: sl.lastBatch, ClientTS: sl.clientTS})
	}
	for k, e := range s.pending {
		if v := e.latestWrite(); v != nil {
			st.Pending = append(st.Pending, pendingWrite{Key: k, Val: v.val, Absent: v.absent})
		}
	}
	err := sealedstate.Save(context.Background(), s.b, s.keys, stateAddr, st)
	return errors.Join(err, s.b.Close())
}

// loadState restores the state saved by the last clean Close, then
// deletes it, so a crash from here on is detected at the next open.
func (s *store) loadState(ctx context.Context) error {
	var st state
	if err := sealedstate.Require(ctx, s.b, s.keys, stateAddr, &st); err != nil {
		return fmt.Errorf("cloak: %w", err)
	}
	if !slices.Equal(st.Budgets, s.budgets) {
		return fmt.Errorf("%w: the store was written with budgets b_1=%d over %d sets (beta %d), the options give b_1=%d over %d sets (beta %d)",
			kv.ErrMismatch, first(st.Budgets), len(st.Budgets), sum(st.Budgets), first(s.budgets), len(s.budgets), sum(s.budgets))
	}
	s.next, s.live, s.counters = st.Next, st.Live, st.Counters
	s.slots, s.where, s.sets = make([]slot, len(st.Slots)), map[string]uint32{}, map[uint64][]uint32{}
	for i, ss := range st.Slots {
		a := uint32(i)
		s.slots[a] = slot{key: ss.Key, held: ss.Held, lastBatch: ss.LastBatch, clientTS: ss.ClientTS}
		s.sets[ss.LastBatch] = append(s.sets[ss.LastBatch], a)
		if ss.Held {
			s.where[ss.Key] = a
		} else {
			s.free = append(s.free, a)
		}
	}
	for _, set := range s.sets {
		s.rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
	}
	for _, p := range st.Pending {
		if _, ok := s.where[p.Key]; !ok {
			return fmt.Errorf("%w: a saved write names a key with no address", kv.ErrTampered)
		}
		e := s.newEntry(p.Key)
		e.write = &value{val: p.Val, absent: p.Absent}
	}
	return sealedstate.Delete(ctx, s.b, s.keys, stateAddr)
}

func first(b []int) int {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func (s *store) Stats() kv.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counters
	util := 0.0
	if c.Batches > 0 {
		util = float64(c.RealQueries) / float64(c.Batches*uint64(s.opts.Beta))
	}
	return kv.Stats{Keys: int64(s.live), Extra: []kv.Stat{
		{Name: "beta", Value: float64(s.opts.Beta)},
		{Name: "sets", Value: float64(len(s.budgets))},
		{Name: "b_1", Value: float64(s.opts.B1)},
		{Name: "zipf_s", Value: s.opts.S},
		{Name: "delta_ms", Value: float64(s.opts.Delta.Microseconds()) / 1000},
		{Name: "addresses", Value: float64(len(s.slots))},
		{Name: "batches", Value: float64(c.Batches)},
		{Name: "batch_utilisation", Value: util},
		{Name: "real_queries", Value: float64(c.RealQueries)},
		{Name: "dummy_queries", Value: float64(c.DummyQueries)},
		{Name: "cache_hits", Value: float64(c.CacheHits)},
		{Name: "coalesced_reads", Value: float64(c.Coalesced)},
		{Name: "reads_from_pending_writes", Value: float64(c.FromPendingWrite)},
		{Name: "pending_keys", Value: float64(len(s.pending))},
		{Name: "backpressure_waits", Value: float64(c.Backpressure)},
		{Name: "failed_batches", Value: float64(c.FailedBatches)},
	}}
}
