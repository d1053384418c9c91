package waffle

import (
	"container/heap"
	"container/list"
	"context"
	"errors"
	"fmt"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
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

// queried reports whether the object is read for a client's request: a
// real query (chooseReads lists them first, in plan order).
func (r read) queried() bool { return r.kind == readReal || r.kind == readConsumed }

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

// prepared is a batch ready to run (Algorithm 1 on at most R requests):
// its keys planned, its reads chosen and listed in the order of its Read,
// and its intent (s.unread) appended to the journal.
//
// Storage sees, whatever the requests: one Read of B distinct addresses,
// one Write of exactly B new addresses (the dummies read re-encrypted,
// plus one cache eviction per other object read, as every other object
// read enters the cache, which always holds exactly C objects between
// batches), then one Delete of the B addresses read; the Read and the
// Write list their addresses in independent random orders, the Delete in
// the Read's.
//
// A batch is journaled twice (state.go): its reads, in the Read's order,
// before the Read is issued; then the state after it, with its Write and
// Delete, before they are issued and before any request is answered.
type prepared struct {
	reqs  []*request
	plans []keyPlan
	pk    *picker // nil for a batch run again by catchUp
	reads []read
	order []int  // order[j]: the index in reads of the j-th address the Read lists
	n     int    // keys after the batch
	lsn   uint64 // the intent's journal record (0: none)
}

// prepare plans batch, chooses its reads and appends its intent to the
// journal, to be made durable before its Read (run). Whatever an earlier
// batch left undone must be finished first (catchUp).
func (s *store) prepare(batch []*request) (*prepared, error) {
	p := &prepared{reqs: batch, pk: &picker{s: s, picked: map[ref]bool{}}}
	p.plans, p.n = s.plan(batch)
	reads, err := s.chooseReads(p.plans, p.pk)
	if err != nil {
		p.pk.restore()
		return nil, err
	}
	p.reads, p.order = reads, s.readOrder(reads)
	in := &intent{ts: s.ts + 1, refs: make([]ref, len(reads))}
	for j, i := range p.order {
		in.refs[j] = reads[i].ref
	}
	if s.log.Durable() {
		p.lsn = s.log.Append(in.encode())
	}
	s.unread = in
	return p, nil
}

// abandon gives up the prepared batch p before its Read: its picks are
// put back and its requests returned, to run in a later batch; its
// intent, journaled, is left to catchUp.
func (p *prepared) abandon() []*request {
	p.pk.restore()
	for _, r := range p.reqs {
		r.err = nil // a kv.ErrFull that plan gave
	}
	return p.reqs
}

// run runs the prepared batch p, which is s.unread: it makes p's intent
// durable, reads its objects, chooses the cache victims, applies the batch
// to the proxy's state and answers p's requests, journals the batch with
// its Write and Delete, and issues them. Once p's record is appended the
// batch has taken effect, whatever fails after it; an error before leaves
// the state as it was, and s.unread for catchUp.
//
// With chain, and R requests waiting once p's record is appended, the
// next batch is prepared from them and its intent made durable with p's
// record, in one group commit (one fsync per batch under load): next.
// Fewer requests found waiting are returned in carry, to begin the next
// batch. No batch is chained when a checkpoint is due, so that it follows
// p.
func (s *store) run(ctx context.Context, p *prepared, chain bool) (next *prepared, carry []*request, err error) {
	if err := s.log.Sync(p.lsn); err != nil {
		return nil, nil, s.halt(err)
	}
	undo := func(err error) (*prepared, []*request, error) {
		if p.pk != nil {
			p.pk.restore()
		}
		return nil, nil, err
	}
	ts := s.unread.ts
	addrs, err := s.fetch(ctx, p.reads, p.order)
	if err != nil {
		return undo(err)
	}
	victims, err := s.victims(p.plans, p.reads)
	if err != nil {
		return undo(err)
	}
	writes, written := s.writes(p.reads, victims, ts)
	traced := s.traceBatch(ts, p, victims, written)
	ch := s.commit(p.plans, p.reads, victims, ts)
	s.nReal = p.n
	if len(s.reals) > 2*p.n+64 {
		s.rebuild(false) // drop stale entries
	}
	reset := s.maybeResetDummies()
	s.publish()
	s.unread = nil
	s.unwritten = &writeBack{items: writes, addrs: addrs}
	if s.log.Durable() {
		s.log.Append(s.batchDelta(ts, ch, reset), durable.Op{Items: writes}, durable.Op{Addrs: addrs})
		if chain && !s.log.Due() {
			next, carry = s.chain()
		}
		if err := s.log.Sync(s.log.Last()); err != nil {
			if next != nil {
				carry = next.abandon()
			}
			return nil, carry, s.halt(err)
		}
	}
	if err := s.flush(ctx); err != nil {
		if next != nil {
			carry = next.abandon()
		}
		return nil, carry, err
	}
	traced()
	return next, carry, nil
}

// chain receives the requests waiting, up to R, without waiting for more,
// and prepares the next batch from them when there are R.
func (s *store) chain() (*prepared, []*request) {
	var waiting []*request
	for len(waiting) < s.opts.R {
		select {
		case r := <-s.reqs:
			waiting = append(waiting, r)
			continue
		default:
		}
		return nil, waiting
	}
	p, err := s.prepare(waiting)
	if err != nil {
		return nil, waiting
	}
	return p, nil
}

// catchUp finishes, before anything else reaches storage, what an earlier
// batch left undone: the Write and Delete of a committed batch, then a
// batch whose reads were journaled but never committed (its Read failed,
// or the proxy crashed after it). That batch is run again on exactly its
// reads, listed in the same order, with no requests (its own were answered
// with an error, or never): storage has seen that Read, or may have, and
// reading other objects in place of some would tell it which ones the
// requests chose (Waffle Sec. 5.1: a batch's real and fake queries must
// look alike). Every real object read enters the cache, as a fake query's
// would, and every dummy read is written back, including one whose place
// an insert was to take.
func (s *store) catchUp(ctx context.Context) error {
	if s.broken != nil {
		return s.broken
	}
	if s.unwritten != nil {
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	if s.unread == nil {
		return nil
	}
	reads, err := s.unreadReads()
	if err != nil {
		return s.halt(err)
	}
	_, _, err = s.run(ctx, &prepared{reads: reads, order: identity(len(reads)), n: s.nReal}, false)
	return err
}

// caughtUp reports whether no batch has anything left undone.
func (s *store) caughtUp() bool { return s.broken == nil && s.unwritten == nil && s.unread == nil }

// unreadReads returns the reads of s.unread run again with no requests,
// in the order of its Read.
func (s *store) unreadReads() ([]read, error) {
	reads := make([]read, len(s.unread.refs))
	seen := make(map[ref]bool, len(reads))
	for i, rf := range s.unread.refs {
		o := s.objs[rf]
		if o == nil || o.elem != nil || seen[rf] {
			return nil, fmt.Errorf("%w: a journaled batch reads an object that is not on storage", errMalformed)
		}
		seen[rf] = true
		kind := readFill
		if rf.Dummy {
			kind = readFakeDummy
		}
		reads[i] = read{ref: rf, obj: o, kind: kind}
	}
	return reads, nil
}

// writeBack is a committed batch's Write and Delete.
type writeBack struct {
	items []backend.Item
	addrs []string
}

// flush issues s.unwritten: its Write, then its Delete. A failed Write is
// kept, to be retried before anything else; a failed Delete is counted
// and dropped (the batch took effect: the objects read are garbage that
// is never read again).
func (s *store) flush(ctx context.Context) error {
	w := s.unwritten
	if err := s.b.Write(ctx, w.items); err != nil {
		return fmt.Errorf("waffle: writing back a batch (retried before the next): %w", err)
	}
	s.unwritten = nil
	if err := s.b.Delete(ctx, w.addrs); err != nil {
		s.counters.DeleteErrors++
	}
	return nil
}

// halt stops the store after its journal failed: the proxy's state can
// no longer be made durable, so no batch may run or answer again.
func (s *store) halt(err error) error {
	s.broken = fmt.Errorf("waffle: store stopped: %w", err)
	return s.broken
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
		switch after := r.m.LeavesKey(p.finalExists, s.valueSize); {
		case after && !p.finalExists:
			if n >= s.capacity {
				r.err = errFull(s.capacity)
				continue
			}
			n++
			p.finalExists = true
		case !after && p.finalExists:
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
	if s.opts.TestingKnobs.Leak == leakFixedFill {
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
	if p.s.opts.TestingKnobs.Leak == leakRandomFakes {
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

// fetch reads the batch's objects in one backend Read (line 30), listed
// in order (order[j] is the index in reads of the j-th address), and
// returns their addresses in the order the Read listed them.
//
// The Read lists them in a random order (readOrder). Waffle Sec. 5.1
// counts a batch as one server access, so the order within it must tell
// storage nothing; chooseReads lists the real queries first, and their
// place would mark which objects the clients asked for. A fresh random
// order, not one sorted by address: sorted orders of the pseudo-random
// ids of one batch's Read and a later Write would correlate through the
// ids' values.
func (s *store) fetch(ctx context.Context, reads []read, order []int) ([]string, error) {
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

// readOrder is the order in which fetch lists a batch's reads: a random
// permutation of their indexes, fresh every batch, so an object's place
// in the Read is uniform and independent of its place at every other
// access (Waffle Sec. 5.1: the batch is one access, whatever its order).
func (s *store) readOrder(reads []read) []int {
	switch s.opts.TestingKnobs.Leak {
	case leakReadInPlanOrder:
		return identity(len(reads))
	case leakKeyedReadOrder:
		return s.byKeyedHash(len(reads), func(i int) ref { return reads[i].ref })
	case leakRealsInPlanOrder:
		return s.realsInPlanOrder(reads)
	}
	return s.rng.Perm(len(reads))
}

// identity is the order 0..n-1.
func identity(n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	return order
}

// writes is the write phase's Write (lines 31-46): the dummies read,
// re-encrypted under fresh ids, and for every other object read, which
// enters the cache, the least recently used cache entry the batch does not
// touch (victims), listed in a random order (as fetch does, so that a
// place in the Write does not mark the dummies, nor follows the order the
// cache evicted the victims in, and an object's place is independent of
// its place at every other access). The Delete of the objects read
// follows it, listing them in the order of the Read. order[j] is the
// j-th item's index among the dummies read, in the order of reads, then
// the victims, in order.
func (s *store) writes(reads []read, victims []*list.Element, ts uint64) (listed []backend.Item, order []int) {
	items, refs := make([]backend.Item, 0, len(reads)), make([]ref, 0, len(reads))
	for _, rd := range reads {
		if rd.rewritten() {
			items, refs = append(items, s.item(rd.ref, ts, nil)), append(refs, rd.ref)
		}
	}
	for _, e := range victims {
		c := e.Value.(*cached)
		items, refs = append(items, s.item(c.ref, s.objs[c.ref].ts, c.val)), append(refs, c.ref)
	}
	order = s.writeOrder(refs, len(refs)-len(victims))
	listed = make([]backend.Item, len(items))
	for j, i := range order {
		listed[j] = items[i]
	}
	return listed, order
}

// writeOrder is the order of a Write of objects refs, the first dummies
// of them the dummies read: a random permutation (writes).
func (s *store) writeOrder(refs []ref, dummies int) []int {
	switch s.opts.TestingKnobs.Leak {
	case leakDummiesWrittenFirst:
		return identity(len(refs))
	case leakKeyedWriteOrder:
		return s.byKeyedHash(len(refs), func(i int) ref { return refs[i] })
	case leakVictimsInEvictionOrder:
		return s.victimsInEvictionOrder(refs, dummies)
	}
	return s.rng.Perm(len(refs))
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

// commit applies a batch whose Read succeeded to the proxy's state: the
// victims leave the cache for storage, the objects read take timestamp
// ts, and the requests are answered (the answers leave once the batch is
// journaled and written back). It returns what changed, for the journal.
//
// Fake queries pick the least recently accessed object (Sec. 4, Challenge
// 2); among objects accessed in the same batch, a victim is ordered by the
// batch that wrote it back (its tie), so the one on storage longest goes
// first. Ordering ties by key instead starves objects: after a bulk load
// the C cached objects share one timestamp and leave the cache over C/(B-
// f_D) batches, and one with a late key stays on storage until they all
// have (an alpha of 165 batches where 3 suffice, in Table 2's high row).
// The dummies read take a random tie: they are written in the same batch.
func (s *store) commit(plans []keyPlan, reads []read, victims []*list.Element, ts uint64) change {
	var ch change
	s.ts = ts
	for _, e := range victims {
		c := s.cache.Remove(e).(*cached)
		o := s.objs[c.ref]
		o.elem, o.tie = nil, ts
		s.push(c.ref, o)
		ch.stored = append(ch.stored, c.ref)
	}
	for _, rd := range reads {
		if !(s.opts.TestingKnobs.Leak == leakRealKeepsID && rd.kind == readReal) {
			rd.obj.ts = ts
		}
		rd.obj.order, rd.obj.tie = ts, 0
		switch {
		case rd.kind == readConsumed:
			delete(s.objs, rd.ref)
			ch.removed = append(ch.removed, rd.ref)
		case rd.ref.Dummy:
			rd.obj.tie = s.rng.Uint64()
			s.push(rd.ref, rd.obj)
			ch.stored = append(ch.stored, rd.ref)
		case rd.kind == readFill:
			rd.obj.elem = s.cache.PushFront(&cached{ref: rd.ref, val: rd.val})
			ch.front++
		}
		s.count(rd.kind)
	}
	for i := range plans {
		p := &plans[i]
		before, found := p.before(reads)
		val, exists := p.answer(before, found, s.valueSize)
		s.settle(p, val, exists, ts, &ch)
	}
	s.counters.Batches++
	return ch
}

// change is what a batch changed besides timestamps and counters: the
// objects it removed (dummies whose place a new key took, deleted keys),
// the objects it put on storage (victims and dummies read), and how many
// cache entries it touched: every entry it adds, or changes, moves to the
// front, so they are the first front entries of the cache, and the others
// keep their order.
type change struct {
	removed, stored []ref
	front           int
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
func (p *keyPlan) answer(val []byte, exists bool, valueSize int) ([]byte, bool) {
	for _, r := range p.reqs {
		var res kv.Result
		val, exists, res, r.err = r.m.Apply(val, exists, valueSize)
		r.result = res
	}
	return val, exists
}

// settle puts key p's final value in the cache (or turns its cache place
// into a dummy when it was deleted), noting the change in ch.
func (s *store) settle(p *keyPlan, val []byte, exists bool, ts uint64, ch *change) {
	switch {
	case p.obj != nil: // the key existed: cached, or read in this batch
		ch.front++
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
		ch.removed = append(ch.removed, p.ref)
		d := newDummy(s.rng, s.objs)
		e.Value = &cached{ref: d}
		s.objs[d] = &object{ts: ts, order: ts, tie: s.rng.Uint64(), elem: e}
	case exists: // an insert
		ch.front++
		o := &object{ts: ts, order: ts}
		s.objs[p.ref] = o
		if p.convert != nil {
			old := p.convert.Value.(*cached).ref
			delete(s.objs, old)
			ch.removed = append(ch.removed, old)
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
// moves no object. It reports whether it reset them.
func (s *store) maybeResetDummies() bool {
	if rf, ok := s.head(true); ok && s.objs[rf].order > s.lastReset {
		s.resetDummies()
		return true
	}
	return false
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
