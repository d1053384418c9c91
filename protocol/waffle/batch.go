package waffle

import (
	"container/heap"
	"container/list"
	"context"
	"errors"

	"github.com/oblivkv/oblivkv/backend"
)

// readKind says why a batch reads an object.
type readKind uint8

const (
	readReal      readKind = iota // a requested key's object (r)
	readConsumed                  // a dummy whose place a new key takes (counted in r)
	readFakeDummy                 // one of the f_D fake queries on dummies
	readFill                      // one of the f_R fake queries on real objects
)

// read is one of the B objects a batch reads.
type read struct {
	ref  ref
	obj  *object
	kind readKind
	val  []byte // its value, once fetched
}

// rewritten reports whether the object read goes back to storage in the
// same batch, re-encrypted under a fresh id: a dummy, unless a new key
// takes its place. Every other object read enters the cache.
func (r read) rewritten() bool { return r.ref.Dummy && r.kind != readConsumed }

// keyPlan is the batch's deduplicated work on one key (dedupReqs).
type keyPlan struct {
	ref         ref
	obj         *object // nil when the key does not exist before the batch
	reqs        []*request
	finalExists bool
	slot        int           // the index in reads of the key's real query
	convert     *list.Element // a cached dummy an insert takes the place of
}

// runBatch runs Algorithm 1 on one batch of requests (at most R): it
// answers every request, or returns an error that answers them all and
// leaves the proxy's state as it was.
//
// Storage sees, whatever the requests: one Read of B distinct addresses,
// one Write of exactly B new addresses (the dummies read re-encrypted,
// plus one cache eviction per other object read, as every other object
// read enters the cache, which always holds exactly C objects between
// batches), then one Delete of the B addresses read; the Read and the
// Write list their addresses in independent random orders, the Delete in
// the Read's.
func (s *store) runBatch(ctx context.Context, batch []*request) (err error) {
	ts := s.ts + 1
	plans, n := s.plan(batch)
	pk := picker{s: s, picked: map[ref]bool{}}
	defer func() {
		if err != nil {
			pk.restore()
		}
	}()
	reads, err := s.chooseReads(plans, &pk)
	if err != nil {
		return err
	}
	addrs, err := s.fetch(ctx, reads)
	if err != nil {
		return err
	}
	victims, err := s.writeBack(ctx, plans, reads, addrs, ts)
	if err != nil {
		return err
	}
	s.traceBatch(ts, reads, victims)
	s.commit(plans, reads, victims, ts)
	s.nReal = n
	if len(s.reals) > 2*n+64 {
		s.rebuild(false) // drop stale entries
	}
	s.maybeResetDummies()
	return nil
}

// plan deduplicates the batch by key (lines 6-15) and decides, in arrival
// order, whether each key exists after its requests; a Put of a new key
// into a full store fails with kv.ErrFull. It returns the keys' plans in
// order of first arrival and the number of keys after the batch.
func (s *store) plan(batch []*request) ([]keyPlan, int) {
	var plans []keyPlan
	at := map[string]int{}
	n := s.nReal
	for _, r := range batch {
		i, ok := at[r.key]
		if !ok {
			i = len(plans)
			at[r.key] = i
			rf := ref{Key: r.key}
			o := s.objs[rf]
			plans = append(plans, keyPlan{ref: rf, obj: o, finalExists: o != nil})
		}
		p := &plans[i]
		switch {
		case r.op == opPut && !p.finalExists:
			if n >= s.capacity {
				r.err = errFull(s.capacity)
				continue
			}
			n++
			p.finalExists = true
		case r.op == opDelete && p.finalExists:
			n--
			p.finalExists = false
		}
		p.reqs = append(p.reqs, r)
	}
	return plans, n
}

// chooseReads picks the batch's B reads (lines 16-29): the r real queries
// (a key on storage, or for an insert the dummy whose place it takes),
// f_D fake queries on dummies, then fake queries on real objects up to B
// (on dummies once no real object is left on storage).
func (s *store) chooseReads(plans []keyPlan, pk *picker) ([]read, error) {
	reads := make([]read, 0, s.opts.B)
	converted := map[*list.Element]bool{}
	for i := range plans {
		p := &plans[i]
		switch {
		case p.obj != nil && p.obj.elem == nil: // on storage: a real query
			pk.picked[p.ref] = true
			p.slot = len(reads)
			reads = append(reads, read{ref: p.ref, obj: p.obj, kind: readReal})
		case p.obj == nil && p.finalExists: // an insert takes a dummy's place
			if rd, ok := pk.pick(true, readConsumed); ok {
				reads = append(reads, rd)
			} else if p.convert = s.cachedDummy(converted); p.convert == nil {
				return nil, errors.New("waffle: internal error: no dummy left for an insert")
			}
		}
	}
	for range s.opts.FD {
		rd, ok := pk.pick(true, readFakeDummy)
		if !ok {
			break // fewer dummies on storage than f_D: fill with real objects
		}
		reads = append(reads, rd)
	}
	want := s.opts.B
	if s.opts.leak == leakFixedFill {
		want = len(reads) + s.opts.B - s.opts.R - s.opts.FD
	}
	for len(reads) < want {
		rd, ok := pk.pick(false, readFill)
		if !ok {
			rd, ok = pk.pick(true, readFill)
		}
		if !ok {
			return nil, errors.New("waffle: internal error: fewer than B objects on storage")
		}
		reads = append(reads, rd)
	}
	return reads, nil
}

// cachedDummy returns the least recently used dummy in the cache not in
// skip, and adds it to skip.
func (s *store) cachedDummy(skip map[*list.Element]bool) *list.Element {
	for e := s.cache.Back(); e != nil; e = e.Prev() {
		if e.Value.(*cached).ref.Dummy && !skip[e] {
			skip[e] = true
			return e
		}
	}
	return nil
}

// picker pops, for one batch, the least recently accessed objects on
// storage, each at most once (a key of a real query is marked picked
// beforehand); restore puts back what it popped, for a batch that fails.
type picker struct {
	s      *store
	picked map[ref]bool
	popped []ref
}

func (p *picker) pick(dummy bool, kind readKind) (read, bool) {
	for {
		rf, ok := p.pop(dummy)
		if !ok {
			return read{}, false
		}
		p.popped = append(p.popped, rf)
		if !p.picked[rf] {
			p.picked[rf] = true
			return read{ref: rf, obj: p.s.objs[rf], kind: kind}, true
		}
	}
}

// pop removes from one kind's index, and returns, the least recently
// accessed object on storage.
func (p *picker) pop(dummy bool) (ref, bool) {
	if p.s.opts.leak == leakRandomFakes {
		return p.s.popRandom(dummy)
	}
	rf, ok := p.s.head(dummy)
	if ok {
		heap.Pop(p.s.index(dummy))
	}
	return rf, ok
}

func (p *picker) restore() {
	for _, rf := range p.popped {
		p.s.push(rf, p.s.objs[rf])
	}
}

// fetch reads the batch's objects in one backend Read (line 30) and
// returns their addresses in the order the Read listed them.
//
// The Read lists them in a random order. Waffle Sec. 5.1 counts a batch
// as one server access, so the order within it must tell storage
// nothing; chooseReads lists the real queries first, and their place
// would mark which objects the clients asked for. A fresh random order,
// not one sorted by address: sorted orders of the pseudo-random ids of
// one batch's Read and a later Write would correlate through the ids'
// values.
func (s *store) fetch(ctx context.Context, reads []read) ([]string, error) {
	order := s.readOrder(len(reads)) // order[j]: the index in reads of the j-th address listed
	addrs := make([]string, len(reads))
	for j, i := range order {
		addrs[j] = s.addr(reads[i].ref, reads[i].obj.ts)
	}
	vals, err := s.b.Read(ctx, addrs)
	if err != nil {
		return nil, err
	}
	for j, i := range order {
		if reads[i].val, err = s.unseal(addrs[j], vals[j]); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// readOrder is the order in which fetch lists a batch's n reads: a random
// permutation of 0..n-1.
func (s *store) readOrder(n int) []int {
	if s.opts.leak == leakReadInPlanOrder {
		return planOrder(n)
	}
	return s.rng.Perm(n)
}

// writeBack is the write phase (lines 31-46): it writes the dummies read,
// re-encrypted under fresh ids, and for every other object read, which
// enters the cache, the least recently used cache entry the batch does not
// touch, in one backend Write listing them in a random order (as fetch
// does, so that a place in the Write does not mark the dummies); then it
// deletes the objects read, addrs, in the order the Read listed them. It
// returns the evicted entries.
func (s *store) writeBack(ctx context.Context, plans []keyPlan, reads []read, addrs []string, ts uint64) ([]*list.Element, error) {
	victims, err := s.victims(plans, reads)
	if err != nil {
		return nil, err
	}
	writes := make([]backend.Item, 0, len(reads))
	for _, rd := range reads {
		if rd.rewritten() {
			writes = append(writes, s.item(rd.ref, ts, nil))
		}
	}
	for _, e := range victims {
		c := e.Value.(*cached)
		writes = append(writes, s.item(c.ref, s.objs[c.ref].ts, c.val))
	}
	if s.opts.leak != leakDummiesWrittenFirst {
		s.rng.Shuffle(len(writes), func(i, j int) { writes[i], writes[j] = writes[j], writes[i] })
	}
	if err := s.b.Write(ctx, writes); err != nil {
		return nil, err
	}
	if err := s.b.Delete(ctx, addrs); err != nil {
		// The batch took effect: the objects read are now garbage that is
		// never read again.
		s.counters.DeleteErrors++
	}
	return victims, nil
}

// victims chooses the cache entries to evict: one per object read that
// enters the cache, least recently used first, skipping the entries the
// batch's keys hold.
func (s *store) victims(plans []keyPlan, reads []read) ([]*list.Element, error) {
	touched := map[*list.Element]bool{}
	for _, p := range plans {
		if p.obj != nil && p.obj.elem != nil {
			touched[p.obj.elem] = true
		}
		if p.convert != nil {
			touched[p.convert] = true
		}
	}
	entering := 0
	for _, rd := range reads {
		if !rd.rewritten() {
			entering++
		}
	}
	var victims []*list.Element
	for e := s.cache.Back(); e != nil && len(victims) < entering; e = e.Prev() {
		if !touched[e] {
			victims = append(victims, e)
		}
	}
	if len(victims) < entering {
		return nil, errors.New("waffle: internal error: the cache cannot hold the batch")
	}
	return victims, nil
}

// traceBatch reports a batch to opts.trace (tests only): the B objects
// read, then the B written, each in the proxy's order (not storage's).
func (s *store) traceBatch(ts uint64, reads []read, victims []*list.Element) {
	if s.opts.trace == nil {
		return
	}
	var rd, wr []ref
	for _, r := range reads {
		rd = append(rd, r.ref)
		if r.rewritten() {
			wr = append(wr, r.ref)
		}
	}
	for _, e := range victims {
		wr = append(wr, e.Value.(*cached).ref)
	}
	s.opts.trace(ts, rd, wr)
}

// commit applies a batch whose backend calls succeeded to the proxy's
// state: the victims leave the cache for storage, the objects read take
// timestamp ts, and the requests are answered.
//
// Fake queries pick the least recently accessed object (Sec. 4, Challenge
// 2); among objects accessed in the same batch, a victim is ordered by the
// batch that wrote it back (its tie), so the one on storage longest goes
// first. Ordering ties by key instead starves objects: after a bulk load
// the C cached objects share one timestamp and leave the cache over C/(B-
// f_D) batches, and one with a late key stays on storage until they all
// have (an alpha of 165 batches where 3 suffice, in Table 2's high row).
// The dummies read take a random tie: they are written in the same batch.
func (s *store) commit(plans []keyPlan, reads []read, victims []*list.Element, ts uint64) {
	s.ts = ts
	for _, e := range victims {
		c := s.cache.Remove(e).(*cached)
		o := s.objs[c.ref]
		o.elem, o.tie = nil, ts
		s.push(c.ref, o)
	}
	for _, rd := range reads {
		if !(s.opts.leak == leakRealKeepsID && rd.kind == readReal) {
			rd.obj.ts = ts
		}
		rd.obj.order, rd.obj.tie = ts, 0
		switch {
		case rd.kind == readConsumed:
			delete(s.objs, rd.ref)
		case rd.ref.Dummy:
			rd.obj.tie = s.rng.Uint64()
			s.push(rd.ref, rd.obj)
		case rd.kind == readFill:
			rd.obj.elem = s.cache.PushFront(&cached{ref: rd.ref, val: rd.val})
		}
		s.count(rd.kind)
	}
	for i := range plans {
		p := &plans[i]
		val, exists := p.answer(p.before(reads))
		s.settle(p, val, exists, ts)
	}
	s.counters.Batches++
}

func (s *store) count(k readKind) {
	switch k {
	case readReal, readConsumed:
		s.counters.RealQueries++
	case readFakeDummy:
		s.counters.FakeDummy++
	case readFill:
		s.counters.FakeReal++
	}
}

// before is the key's value and existence before the batch.
func (p *keyPlan) before(reads []read) ([]byte, bool) {
	switch {
	case p.obj == nil:
		return nil, false
	case p.obj.elem != nil:
		return p.obj.elem.Value.(*cached).val, true
	default:
		return reads[p.slot].val, true
	}
}

// answer answers the key's requests in arrival order, starting from its
// value and existence val, exists, and returns them after the last.
func (p *keyPlan) answer(val []byte, exists bool) ([]byte, bool) {
	for _, r := range p.reqs {
		switch r.op {
		case opGet:
			if exists {
				r.result, r.found = append([]byte{}, val...), true
			}
		case opPut:
			val, exists = r.value, true
		case opDelete:
			val, exists = nil, false
		}
	}
	return val, exists
}

// settle puts key p's final value in the cache (or turns its cache place
// into a dummy when it was deleted).
func (s *store) settle(p *keyPlan, val []byte, exists bool, ts uint64) {
	switch {
	case p.obj != nil: // the key existed: cached, or read in this batch
		if p.obj.elem == nil {
			p.obj.elem = s.cache.PushFront(&cached{ref: p.ref})
		}
		e := p.obj.elem
		s.cache.MoveToFront(e)
		if exists {
			e.Value.(*cached).val = val
			return
		}
		delete(s.objs, p.ref)
		d := newDummy(s.rng, s.objs)
		e.Value = &cached{ref: d}
		s.objs[d] = &object{ts: ts, order: ts, tie: s.rng.Uint64(), elem: e}
	case exists: // an insert
		o := &object{ts: ts, order: ts}
		s.objs[p.ref] = o
		if p.convert != nil {
			delete(s.objs, p.convert.Value.(*cached).ref)
			p.convert.Value = &cached{ref: p.ref, val: val}
			s.cache.MoveToFront(p.convert)
			o.elem = p.convert
		} else {
			o.elem = s.cache.PushFront(&cached{ref: p.ref, val: val})
		}
	}
}

// maybeResetDummies sets every dummy's timestamp to ts once every dummy on
// storage has been accessed since the last reset: every D/f_D batches in a
// full store (Sec. 6.2). As in the paper's BST on <ts : key>, dummies with
// equal timestamps are then picked in the order of their random ids, the
// same order in every round: a dummy written in batch j of a round is read
// again by batch j of the next, which keeps its alpha within ceil(D/f_D)
// (Theorem 7.1). A fresh random order at each reset would let a dummy
// written early in one round be read last in the next, at an alpha of up
// to about 2D/f_D. Storage ids keep their own timestamps, so the reset
// moves no object.
func (s *store) maybeResetDummies() {
	if rf, ok := s.head(true); ok && s.objs[rf].order > s.lastReset {
		s.resetDummies()
	}
}

func (s *store) resetDummies() {
	s.lastReset = s.ts
	for rf, o := range s.objs {
		if rf.Dummy {
			o.order, o.tie = s.ts, 0
		}
	}
	s.rebuild(true)
}
