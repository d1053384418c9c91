package waffle

import (
	"bytes"
	"container/list"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// deleteChunk bounds the addresses of one backend delete of a bulk load.
const deleteChunk = 1 << 14

// state is the proxy's whole state, a checkpoint's content.
type state struct {
	Params        params
	TS, LastReset uint64
	Objects       []objectState
	Cache         []cacheState // most recently used first
	Counters      counters
	// Garbage is the previous layout's addresses in a bulk load's
	// checkpoint, deleted again at recovery.
	Garbage []string
}

// params are the options a store is written with; reopening it with
// others is refused.
type params struct{ B, R, FD, D, C int }

func (o Options) params() params { return params{B: o.B, R: o.R, FD: o.FD, D: o.D, C: o.C} }

type objectState struct {
	Dummy          bool
	Key            string
	TS, Order, Tie uint64
}

type cacheState struct {
	Dummy bool
	Key   string
	Val   []byte
}

// stateMagic begins a checkpoint; the gob encoding of a state follows.
const stateMagic = "oblivkv waffle checkpoint v1\n"

// Journal records (internal/durable) carry one of these deltas of the
// proxy's state. A batch writes two records, an intent and then the
// batch; a bulk load one.
const (
	// deltaIntent: a batch's reads, in the order of its Read, journaled
	// before the Read is issued.
	deltaIntent byte = iota + 1
	// deltaBatch: the state a batch changed, journaled with its Write and
	// Delete before they are issued.
	deltaBatch
	// deltaLoad: a bulk load begins; its timestamp is used up.
	deltaLoad
)

// intent is a batch's reads, in the order of its Read.
type intent struct {
	ts   uint64
	refs []ref
}

func (in *intent) encode() []byte {
	b := []byte{deltaIntent}
	b = binary.AppendUvarint(b, in.ts)
	b = binary.AppendUvarint(b, uint64(len(in.refs)))
	for _, rf := range in.refs {
		b = appendRef(b, rf)
	}
	return b
}

// batchDelta describes the batch at timestamp ts that just changed the
// state by ch (and reset the dummies' timestamps when reset): the
// counters, the objects removed, the objects it put on storage and the
// cache entries it touched, front first, each object with its
// timestamps and each real cache entry with its value.
func (s *store) batchDelta(ts uint64, ch change, reset bool) []byte {
	b := []byte{deltaBatch}
	b = binary.AppendUvarint(b, ts)
	b = delta.AppendBool(b, reset)
	c := s.counters
	for _, v := range []uint64{c.Batches, c.RealQueries, c.FakeReal, c.FakeDummy, c.DeleteErrors} {
		b = binary.AppendUvarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(ch.removed)))
	for _, rf := range ch.removed {
		b = appendRef(b, rf)
	}
	b = binary.AppendUvarint(b, uint64(len(ch.stored)))
	for _, rf := range ch.stored {
		b = appendObject(appendRef(b, rf), s.objs[rf])
	}
	b = binary.AppendUvarint(b, uint64(ch.front))
	e := s.cache.Front()
	for range ch.front {
		c := e.Value.(*cached)
		b = appendObject(appendRef(b, c.ref), s.objs[c.ref])
		if !c.ref.Dummy {
			b = delta.AppendBytes(b, c.val)
		}
		e = e.Next()
	}
	return b
}

func appendRef(b []byte, rf ref) []byte {
	return delta.AppendBytes(delta.AppendBool(b, rf.Dummy), []byte(rf.Key))
}

func appendObject(b []byte, o *object) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(b, o.ts), o.order), o.tie)
}

// Apply implements durable.Machine: it applies a journaled delta to the
// state. An intent is s.unread until its batch's delta follows.
func (s *store) Apply(rec []byte) error {
	d := delta.NewDecoder(rec)
	switch kind := d.Byte(); kind {
	case deltaIntent:
		in := &intent{ts: d.Uvarint()}
		for n := d.Count(); n > 0 && !d.Failed(); n-- {
			in.refs = append(in.refs, readRef(d))
		}
		d.Check(in.ts == s.ts+1 && s.unread == nil, "batch out of sequence")
		if err := d.Done(); err != nil {
			return err
		}
		s.unread = in
	case deltaBatch:
		return s.replayBatch(d)
	case deltaLoad:
		ts := d.Uvarint()
		d.Check(ts == s.ts+1 && s.unread == nil, "load out of sequence")
		if err := d.Done(); err != nil {
			return err
		}
		s.ts = ts // a load cut short: the previous layout is in force
	default:
		return fmt.Errorf("%w: journal delta of kind %d", errMalformed, kind)
	}
	return nil
}

// replayBatch applies a batch's delta (batchDelta).
func (s *store) replayBatch(d *delta.Decoder) error {
	ts := d.Uvarint()
	d.Check(ts == s.ts+1 && (s.unread == nil || s.unread.ts == ts), "batch out of sequence")
	reset := d.Bool()
	var c counters
	for _, v := range []*uint64{&c.Batches, &c.RealQueries, &c.FakeReal, &c.FakeDummy, &c.DeleteErrors} {
		*v = d.Uvarint()
	}
	var removed []ref
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		removed = append(removed, readRef(d))
	}
	type entry struct {
		rf             ref
		ts, order, tie uint64
		val            []byte
	}
	obj := func() entry {
		rf := readRef(d)
		return entry{rf: rf, ts: d.Uvarint(), order: d.Uvarint(), tie: d.Uvarint()}
	}
	var stored, front []entry
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		stored = append(stored, obj())
	}
	for n := d.Count(); n > 0 && !d.Failed(); n-- {
		e := obj()
		if !e.rf.Dummy {
			e.val = d.Bytes(s.valueSize)
		}
		front = append(front, e)
	}
	for _, rf := range removed {
		d.Check(s.objs[rf] != nil, "an unknown object removed")
	}
	for _, e := range stored {
		d.Check(s.objs[e.rf] != nil, "an unknown object stored")
	}
	d.Check(len(front) <= s.opts.C, "cache entries")
	if err := d.Done(); err != nil {
		return err
	}
	uncache := func(o *object) {
		if o.elem != nil {
			s.cache.Remove(o.elem)
			o.elem = nil
		}
	}
	for _, rf := range removed {
		uncache(s.objs[rf])
		delete(s.objs, rf)
	}
	for _, e := range stored {
		o := s.objs[e.rf]
		uncache(o)
		o.ts, o.order, o.tie = e.ts, e.order, e.tie
	}
	for i := len(front) - 1; i >= 0; i-- {
		e := front[i]
		o := s.objs[e.rf]
		if o == nil {
			o = &object{}
			s.objs[e.rf] = o
		}
		uncache(o)
		o.ts, o.order, o.tie = e.ts, e.order, e.tie
		o.elem = s.cache.PushFront(&cached{ref: e.rf, val: e.val})
	}
	s.ts, s.counters = ts, c
	if reset {
		s.lastReset = ts
		for rf, o := range s.objs {
			if rf.Dummy {
				o.order, o.tie = ts, 0
			}
		}
	}
	s.unread = nil
	return nil
}

// checkpoint replaces the journal by the whole state, once nothing is
// left undone (catchUp).
func (s *store) checkpoint(ctx context.Context) error {
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	return s.log.CheckpointOf(ctx, s)
}

// recover rebuilds the proxy's state from the journal
// (durable.Log.Replay): the last checkpoint, then the records after it,
// whose Writes and Deletes are issued again in order. A bulk load's
// previous layout, which the load may not have finished deleting, is
// deleted again. A batch whose reads were journaled without the batch is
// then run again on the same reads, with no requests (catchUp). It ends
// with a checkpoint, so the next crash replays nothing of this one.
func (s *store) recover(ctx context.Context) error {
	applied, err := s.log.Replay(ctx, s)
	if err != nil {
		return fmt.Errorf("waffle: %w", err)
	}
	if err := s.installed(); err != nil {
		return err
	}
	garbage := len(s.garbage) > 0
	if garbage {
		if err := s.deleteChunks(ctx, s.garbage); err != nil {
			return fmt.Errorf("waffle: deleting the layout a bulk load replaced: %w", err)
		}
		s.garbage = nil
	}
	if applied == 0 && !garbage {
		return nil // the checkpoint is the state
	}
	if err := s.checkpoint(ctx); err != nil {
		return fmt.Errorf("waffle: completing the recovery: %w", err)
	}
	return nil
}

// Snapshot implements durable.Machine: the proxy's state, a checkpoint's
// content.
func (s *store) Snapshot() ([]byte, error) {
	st := state{Params: s.opts.params(), TS: s.ts, LastReset: s.lastReset, Counters: s.counters, Garbage: s.garbage,
		Objects: make([]objectState, 0, len(s.objs)), Cache: make([]cacheState, 0, s.cache.Len())}
	for rf, o := range s.objs {
		st.Objects = append(st.Objects, objectState{Dummy: rf.Dummy, Key: rf.Key, TS: o.ts, Order: o.order, Tie: o.tie})
	}
	for e := s.cache.Front(); e != nil; e = e.Next() {
		c := e.Value.(*cached)
		st.Cache = append(st.Cache, cacheState{Dummy: c.ref.Dummy, Key: c.ref.Key, Val: c.val})
	}
	var buf bytes.Buffer
	buf.WriteString(stateMagic)
	if err := gob.NewEncoder(&buf).Encode(st); err != nil {
		return nil, fmt.Errorf("waffle: encoding the state: %w", err)
	}
	return buf.Bytes(), nil
}

// Restore implements durable.Machine: it installs a checkpoint's state
// after checking it against the store's options.
func (s *store) Restore(plain []byte) error {
	rest, ok := bytes.CutPrefix(plain, []byte(stateMagic))
	if !ok {
		return fmt.Errorf("%w: the checkpoint has an unknown format", errMalformed)
	}
	var st state
	if err := gob.NewDecoder(bytes.NewReader(rest)).Decode(&st); err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	if want := s.opts.params(); st.Params != want {
		return fmt.Errorf("%w: the store was written with %+v, the options ask for %+v", kv.ErrMismatch, st.Params, want)
	}
	s.ts, s.lastReset, s.counters, s.garbage = st.TS, st.LastReset, st.Counters, st.Garbage
	s.objs, s.cache = make(map[ref]*object, len(st.Objects)), list.New()
	for _, ob := range st.Objects {
		s.objs[ref{Dummy: ob.Dummy, Key: ob.Key}] = &object{ts: ob.TS, order: ob.Order, tie: ob.Tie}
	}
	for _, c := range st.Cache {
		rf := ref{Dummy: c.Dummy, Key: c.Key}
		o := s.objs[rf]
		if o == nil || o.elem != nil {
			return fmt.Errorf("%w: the cache names an unknown object", errMalformed)
		}
		o.elem = s.cache.PushBack(&cached{ref: rf, val: c.Val})
	}
	return nil
}

// installed completes a state restored and replayed: the key count and
// the ordered indexes are derived from the objects, and the state is
// checked to hold the store's N+D objects, C of them in the cache.
func (s *store) installed() error {
	s.nReal = 0
	for rf := range s.objs {
		if !rf.Dummy {
			s.nReal++
		}
	}
	if len(s.objs) != s.capacity+s.opts.D || s.cache.Len() != s.opts.C || s.nReal > s.capacity {
		return fmt.Errorf("%w: %d objects, %d keys and %d cached; the store holds %d objects and caches %d",
			errMalformed, len(s.objs), s.nReal, s.cache.Len(), s.capacity+s.opts.D, s.opts.C)
	}
	s.rebuild(false)
	s.rebuild(true)
	return nil
}

// writeInitial lays out a fresh store: N+D dummies, the spare capacity of
// the N keys plus the D dummies of a full store. An insert later takes one
// dummy's place.
func (s *store) writeInitial(ctx context.Context) error {
	if err := s.layout(ctx, nil, 0); err != nil {
		return fmt.Errorf("waffle: writing the initial dummies: %w", err)
	}
	return nil
}

// Load implements kv.Loader (Sec. 6.1): the items and the dummies that
// fill the spare capacity are laid out afresh, and the previous dummies
// deleted.
//
// The load is journaled first, using up its timestamp: cut short, it
// leaves the previous layout in force (the objects it wrote are never
// read). Once every object is written, the loaded state is checkpointed
// with the previous layout's addresses, then those are deleted: a crash
// from the checkpoint on deletes them again at recovery. A checkpoint that
// fails stops the store; reopened, it is empty.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.publish()
	if err := s.catchUp(ctx); err != nil {
		return s.nReal, err
	}
	if s.nReal > 0 {
		return s.nReal, kv.ErrNotEmpty
	}
	objs, err := s.collect(items)
	if err != nil {
		return 0, err
	}
	n, old, ts := len(objs), s.storedAddrs(), s.ts+1
	begin, err := s.log.Commit(binary.AppendUvarint([]byte{deltaLoad}, ts))
	if err != nil {
		return 0, s.halt(err)
	}
	s.ts = ts
	if err := s.layout(ctx, objs, ts); err != nil {
		return 0, err // the old layout is still in force
	}
	if s.log.Durable() {
		s.garbage = old
		st, err := s.Snapshot()
		if err == nil {
			err = s.log.Checkpoint(ctx, st, begin)
		}
		if err != nil {
			return 0, s.halt(fmt.Errorf("checkpointing a bulk load: %w", err))
		}
	}
	if err := s.deleteChunks(ctx, old); err != nil {
		s.counters.DeleteErrors++ // deleted again at recovery
		return n, nil
	}
	s.garbage = nil
	return n, nil
}

// collect returns the distinct keys of items (the last value of each
// wins), or kv.ErrFull beyond the capacity.
func (s *store) collect(items iter.Seq2[string, []byte]) ([]cached, error) {
	var objs []cached
	at := map[string]int{}
	for k, v := range items {
		v = append([]byte{}, v...)
		if i, dup := at[k]; dup {
			objs[i].val = v
			continue
		}
		if len(objs) == s.capacity {
			return nil, errFull(s.capacity)
		}
		at[k] = len(objs)
		objs = append(objs, cached{ref: ref{Key: k}, val: v})
	}
	return objs, nil
}

// layout writes a new layout at timestamp ts (Sec. 6.1) of the real
// objects items and the N+D-len(items) dummies that fill the spare
// capacity: C random real objects (topped up with dummies when there are
// fewer) fill the cache, which always holds exactly C objects between
// batches; the others are written shuffled, in large backend writes. The
// layout replaces the proxy's state only once every write succeeded.
func (s *store) layout(ctx context.Context, items []cached, ts uint64) error {
	nReal := len(items)
	s.rng.Shuffle(nReal, func(i, j int) { items[i], items[j] = items[j], items[i] })
	objs, cache := make(map[ref]*object, s.capacity+s.opts.D), list.New()
	for len(items) < s.capacity+s.opts.D {
		d := newDummy(s.rng, objs)
		objs[d] = nil
		items = append(items, cached{ref: d})
	}
	for i, c := range items {
		o := &object{ts: ts, order: ts}
		objs[c.ref] = o
		if i < s.opts.C {
			o.elem = cache.PushBack(&cached{ref: c.ref, val: c.val})
		}
	}
	stored := items[s.opts.C:]
	s.rng.Shuffle(len(stored), func(i, j int) { stored[i], stored[j] = stored[j], stored[i] })
	w := tree.BatchWriter{B: s.b}
	for _, c := range stored {
		if err := w.Add(ctx, s.item(c.ref, ts, c.val)); err != nil {
			return err
		}
	}
	if err := w.Flush(ctx); err != nil {
		return err
	}
	s.objs, s.cache, s.ts, s.nReal = objs, cache, ts, nReal
	s.rebuild(false)
	s.resetDummies()
	return nil
}

// storedAddrs returns the addresses of the objects on storage.
func (s *store) storedAddrs() []string {
	var addrs []string
	for rf, o := range s.objs {
		if o.elem == nil {
			addrs = append(addrs, s.addr(rf, o.ts))
		}
	}
	return addrs
}

func (s *store) deleteChunks(ctx context.Context, addrs []string) error {
	for len(addrs) > 0 {
		n := min(deleteChunk, len(addrs))
		if err := s.b.Delete(ctx, addrs[:n]); err != nil {
			return err
		}
		addrs = addrs[n:]
	}
	return nil
}

// Close stops batching, finishes what a batch left undone, replaces the
// journal by a checkpoint and closes the backend. The caller (kv)
// guarantees no request is in flight.
func (s *store) Close() error {
	close(s.stop)
	<-s.loopDone
	s.mu.Lock()
	err := s.checkpoint(context.Background())
	s.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("waffle: closing without a checkpoint; the next open replays the journal: %w", err)
	}
	return errors.Join(err, s.b.Close())
}

var errMalformed = errors.New("waffle: trusted state is malformed")

// readRef reads an object's reference (appendRef).
func readRef(d *delta.Decoder) ref {
	dummy := d.Bool()
	return ref{Dummy: dummy, Key: string(d.Bytes(math.MaxInt))}
}
