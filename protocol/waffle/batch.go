package waffle

import (
	"container/list"
	"context"
	"errors"

	"github.com/oblivkv/oblivkv/backend"
)

// Kinds of the B reads of a batch.
const (
	readReal      = iota // a requested key's object (r)
	readConsumed         // a dummy whose place a new key takes (counted in r)
	readFakeDummy        // one of the f_D fake queries on dummies
	readFill             // one of the f_R fake queries on real objects
)

type read struct {
	ref  ref
	obj  *object
	kind int
	addr string
	val  []byte
}

// keyPlan is the batch's deduplicated work on one key (dedupReqs).
type keyPlan struct {
	ref         ref
	obj         *object // nil when the key does not exist before the batch
	reqs        []*request
	finalExists bool
	slot        int           // the key's read, or -1
	convert     *list.Element // a cached dummy an insert takes the place of
}

type popped struct {
	dummy bool
	e     entry
}

// pick pops the least recently accessed object on storage of one kind not
// yet picked in this batch.
func (s *store) pick(dummy bool, picked map[ref]bool, pops *[]popped) (ref, *object, bool) {
	h := &s.reals
	if dummy {
		h = &s.dummies
	}
	for {
		e, ok := h.pop()
		if !ok {
			return ref{}, nil, false
		}
		rf := ref{Dummy: dummy, Key: e.key}
		o := s.objs[rf]
		if o == nil || o.elem != nil || o.order != e.order || o.tie != e.tie {
			continue // stale entry
		}
		*pops = append(*pops, popped{dummy, e})
		if picked[rf] {
			continue
		}
		picked[rf] = true
		return rf, o, true
	}
}

func (s *store) push(rf ref, o *object) {
	e := entry{order: o.order, tie: o.tie, key: rf.Key}
	if rf.Dummy {
		s.dummies.push(e)
	} else {
		s.reals.push(e)
	}
}

// runBatch runs Algorithm 1 on one batch of requests (at most R): it
// answers every request, or returns an error that answers them all and
// leaves the proxy's state as it was.
//
// Storage sees, whatever the requests: one Read of B distinct addresses,
// one Write of exactly B new addresses (the f_D dummies read, and any
// dummies read as fill, re-encrypted under fresh ids, plus one cache
// eviction per other object read, as every other object read enters the
// cache, which always holds exactly C objects between batches), then one
// Delete of the B addresses read.
func (s *store) runBatch(ctx context.Context, batch []*request) error {
	ts := s.ts + 1
	// Read phase (lines 6-15): deduplicate by key, decide existence and
	// capacity in arrival order.
	plans := map[string]*keyPlan{}
	var order []*keyPlan
	n := s.nReal
	for _, r := range batch {
		p := plans[r.key]
		if p == nil {
			p = &keyPlan{ref: ref{Key: r.key}, slot: -1}
			p.obj = s.objs[p.ref]
			p.finalExists = p.obj != nil
			plans[r.key] = p
			order = append(order, p)
		}
		switch r.op {
		case opPut:
			if !p.finalExists {
				if n >= s.capacity {
					r.err = errFull(s.capacity)
					continue
				}
				n++
				p.finalExists = true
			}
		case opDelete:
			if p.finalExists {
				n--
				p.finalExists = false
			}
		}
		p.reqs = append(p.reqs, r)
	}

	// The B reads (lines 16-29).
	picked := map[ref]bool{}
	var pops []popped
	restore := func() {
		for _, p := range pops {
			if p.dummy {
				s.dummies.push(p.e)
			} else {
				s.reals.push(p.e)
			}
		}
	}
	reads := make([]read, 0, s.opts.B)
	converted := map[*list.Element]bool{}
	for _, p := range order {
		switch {
		case p.obj != nil && p.obj.elem == nil: // on storage: a real query
			picked[p.ref] = true
			p.slot = len(reads)
			reads = append(reads, read{ref: p.ref, obj: p.obj, kind: readReal})
		case p.obj == nil && p.finalExists: // an insert takes a dummy's place
			if rf, o, ok := s.pick(true, picked, &pops); ok {
				p.slot = len(reads)
				reads = append(reads, read{ref: rf, obj: o, kind: readConsumed})
			} else if p.convert = s.cachedDummy(converted); p.convert == nil {
				restore()
				return errors.New("waffle: internal error: no dummy left for an insert")
			}
		}
	}
	realQueries := len(reads)
	for range s.opts.FD {
		rf, o, ok := s.pick(true, picked, &pops)
		if !ok {
			break // fewer dummies on storage than f_D: fill with real objects
		}
		reads = append(reads, read{ref: rf, obj: o, kind: readFakeDummy})
	}
	for len(reads) < s.opts.B {
		rf, o, ok := s.pick(false, picked, &pops)
		if !ok {
			rf, o, ok = s.pick(true, picked, &pops)
		}
		if !ok {
			restore()
			return errors.New("waffle: internal error: fewer than B objects on storage")
		}
		reads = append(reads, read{ref: rf, obj: o, kind: readFill})
	}
	addrs := make([]string, len(reads))
	for i := range reads {
		reads[i].addr = s.addr(reads[i].ref, reads[i].obj.ts)
		addrs[i] = reads[i].addr
	}
	vals, err := s.b.Read(ctx, addrs)
	if err == nil {
		for i := range reads {
			if reads[i].val, err = s.open(addrs[i], vals[i]); err != nil {
				break
			}
		}
	}
	if err != nil {
		restore()
		return err
	}

	// Write phase (lines 31-46): dummies read go back re-encrypted under
	// fresh ids; every other object read enters the cache and evicts the
	// least recently used untouched entry.
	touched := map[*list.Element]bool{}
	for _, p := range order {
		if p.obj != nil && p.obj.elem != nil {
			touched[p.obj.elem] = true
		}
		if p.convert != nil {
			touched[p.convert] = true
		}
	}
	entering, writes := 0, make([]backend.Item, 0, s.opts.B)
	for _, rd := range reads {
		if rd.ref.Dummy && rd.kind != readConsumed {
			a := s.addr(rd.ref, ts)
			writes = append(writes, backend.Item{Addr: a, Value: s.seal(a, nil)})
		} else {
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
		restore()
		return errors.New("waffle: internal error: the cache cannot hold the batch")
	}
	for _, e := range victims {
		c := e.Value.(*cached)
		a := s.addr(c.ref, s.objs[c.ref].ts)
		writes = append(writes, backend.Item{Addr: a, Value: s.seal(a, c.val)})
	}
	if err := s.b.Write(ctx, writes); err != nil {
		restore()
		return err
	}
	if err := s.b.Delete(ctx, addrs); err != nil {
		// The batch took effect: the objects read are now garbage that is
		// never read again.
		s.counters.DeleteErrors++
	}

	s.traceBatch(ts, reads, victims)

	// Commit.
	s.ts = ts
	for _, e := range victims {
		c := s.cache.Remove(e).(*cached)
		o := s.objs[c.ref]
		o.elem = nil
		s.push(c.ref, o)
	}
	for _, rd := range reads {
		rd.obj.ts, rd.obj.order, rd.obj.tie = ts, ts, 0
		switch {
		case rd.kind == readConsumed:
			delete(s.objs, rd.ref)
		case rd.ref.Dummy:
			rd.obj.tie = s.rng.Uint64()
			s.push(rd.ref, rd.obj)
		case rd.kind == readFill:
			rd.obj.elem = s.cache.PushFront(&cached{ref: rd.ref, val: rd.val})
		}
	}
	for _, p := range order {
		var val []byte
		exists := p.obj != nil
		switch {
		case p.obj != nil && p.obj.elem != nil:
			val = p.obj.elem.Value.(*cached).val
		case p.slot >= 0 && exists:
			val = reads[p.slot].val
		}
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
		s.settle(p, val, exists, ts)
	}
	s.nReal = n
	if len(s.reals) > 2*n+64 {
		s.rebuildReals() // drop stale entries
	}
	s.counters.Batches++
	s.counters.RealQueries += uint64(realQueries)
	for _, rd := range reads {
		switch rd.kind {
		case readFakeDummy:
			s.counters.FakeDummy++
		case readFill:
			s.counters.FakeReal++
		}
	}
	s.maybeResetDummies()
	return nil
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
		d := s.newDummy()
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

// maybeResetDummies sets every dummy's ordering timestamp to ts (with a
// fresh random tie-break, so the next round picks them in a new order) once
// every dummy on storage has been accessed since the last reset: every
// D/f_D batches in a full store (Sec. 6.2). Storage ids keep their own
// timestamps, so the reset moves no object.
func (s *store) maybeResetDummies() {
	for {
		if len(s.dummies) == 0 {
			return // every dummy is in the cache
		}
		e := s.dummies[0]
		rf := ref{Dummy: true, Key: e.key}
		if o := s.objs[rf]; o != nil && o.elem == nil && o.order == e.order && o.tie == e.tie {
			if e.order <= s.lastReset {
				return // a dummy not accessed since the last reset
			}
			break
		}
		s.dummies.pop() // stale
	}
	s.resetDummies()
}

func (s *store) resetDummies() {
	s.lastReset = s.ts
	es := make([]entry, 0, len(s.dummies))
	for rf, o := range s.objs {
		if !rf.Dummy {
			continue
		}
		o.order, o.tie = s.ts, s.rng.Uint64()
		if o.elem == nil {
			es = append(es, entry{order: o.order, tie: o.tie, key: rf.Key})
		}
	}
	s.dummies.rebuild(es)
}

// rebuildReals rebuilds the index of real objects on storage.
func (s *store) rebuildReals() {
	var es []entry
	for rf, o := range s.objs {
		if !rf.Dummy && o.elem == nil {
			es = append(es, entry{order: o.order, tie: o.tie, key: rf.Key})
		}
	}
	s.reals.rebuild(es)
}
