package cloak

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
)

// The journal (internal/durable) holds, after the last checkpoint, one
// record per change of the proxy's state, in the order the proxy made
// them (each is appended under s.mu):
//
//   - recWrite, a client's Put or Delete: the key, the value (or absent)
//     and the free address a new key took. Made durable before the write
//     is acknowledged; concurrent writers share one fsync.
//   - recBatch, a new batch: its id, its addresses in the order of its Read
//     and its permutation. Made durable before its Read is issued.
//   - recWriteBack, a batch's write-back: its id, and the sealed elements
//     of its Write for durable.Log.Replay to redo. Made durable before the
//     Write is issued.
//   - recCommit, a batch's commit once storage took its Write: its id and
//     which of its elements are absent (the addresses the commit frees).
//     It is not waited for: any later record's fsync carries it, and
//     without it recovery sends the batch again, which then finds its own
//     write-back on storage (fetch) and commits.
//   - recLoad, a bulk load begins: a checkpoint ends it.
//
// Recovery issues again, in order, every write-back after the checkpoint,
// so storage need not sync a write-back (backend.DeferSync; every
// checkpoint syncs storage): a power cut that loses some, or storage that
// loses its latest writes (Redis without fsync), loses nothing the
// journal holds. Then the recovered proxy sends again the one batch that
// may not have committed, unchanged, as it sends again a batch whose
// backend calls failed: its Read finds its own write-back if the journal
// held it, else the elements it read before. Storage sees again Writes
// and a Read it saw, or would have seen, nothing new.
//
// Checkpoints come every checkpointEvery batches, after a commit: the
// count storage sees, never the client writes it must not.
const (
	recWrite byte = iota + 1
	recBatch
	recCommit
	recLoad
	recWriteBack
)

// CheckpointBatches is how many batches run between checkpoints. The
// journal holds every write-back in between (beta sealed elements each,
// about 1 MB at 2^16 keys of 1 KiB), which a recovery writes again: 100
// batches (2 s at the default Delta) bound both to about 100 MB.
const CheckpointBatches = 100

const checkpointMagic = "oblivkv cloak checkpoint v1\n"

var errMalformed = errors.New("cloak: trusted state is malformed")

// journalWrite appends the record of a client write; key takes free
// address a first when reserve is set. It returns the record's LSN (0
// without a journal).
func (s *store) journalWrite(key string, v value, reserve bool, a uint32) uint64 {
	if !s.log.Durable() {
		return 0
	}
	b := make([]byte, 0, 16+len(key)+len(v.val))
	b = delta.AppendBool(delta.AppendBytes(append(b, recWrite), []byte(key)), v.absent)
	if !v.absent {
		b = delta.AppendBytes(b, v.val)
	}
	r := uint64(0)
	if reserve {
		r = uint64(a) + 1
	}
	return s.log.Append(binary.AppendUvarint(b, r))
}

// journalBatch appends the record of new batch b and returns its LSN.
func (s *store) journalBatch(b *batch) uint64 {
	if !s.log.Durable() {
		return 0
	}
	r := make([]byte, 0, 24+6*len(b.addrs))
	r = binary.AppendUvarint(append(r, recBatch), b.id)
	r = binary.AppendUvarint(r, uint64(b.real))
	r = binary.AppendUvarint(r, uint64(len(b.addrs)))
	for _, a := range b.addrs {
		r = binary.AppendUvarint(r, uint64(a))
	}
	for _, p := range b.perm {
		r = binary.AppendUvarint(r, uint64(p))
	}
	return s.log.Append(r)
}

// journalWriteBack journals batch b's Write of items and waits until the
// record is durable.
func (s *store) journalWriteBack(b *batch, items []backend.Item) error {
	if !s.log.Durable() {
		return nil
	}
	_, err := s.log.Commit(binary.AppendUvarint([]byte{recWriteBack}, b.id), durable.Op{Items: items})
	return err
}

// journalCommit appends the record of batch b's commit, elems being its
// elements.
func (s *store) journalCommit(b *batch, elems []value) {
	if !s.log.Durable() {
		return
	}
	absent := make([]byte, (len(elems)+7)/8)
	for i, v := range elems {
		if v.absent {
			absent[i/8] |= 1 << (i % 8)
		}
	}
	r := binary.AppendUvarint([]byte{recCommit}, b.id)
	s.log.Append(append(r, absent...))
}

// Apply implements durable.Machine: it applies one journal record to the
// state recovered so far, the same changes the proxy made when it
// appended the record, without the answers to clients. A batch without
// its commit yet is s.retry. A record that begins a bulk load sets
// s.loadCut; none may follow it, since a checkpoint ends the load.
func (s *store) Apply(rec []byte) error {
	if s.loadCut {
		return fmt.Errorf("%w: a record follows a bulk load never checkpointed", errMalformed)
	}
	d := delta.NewDecoder(rec)
	switch d.Byte() {
	case recWrite:
		return s.replayWrite(d)
	case recBatch:
		return s.replayBatch(d)
	case recCommit:
		return s.replayCommit(d)
	case recLoad:
		s.loadCut = true
		return d.Done()
	case recWriteBack:
		return s.replayWriteBack(d)
	}
	d.Check(false, "record kind")
	return d.Err()
}

func (s *store) replayWrite(d *delta.Decoder) error {
	key := string(d.Bytes(math.MaxInt))
	v := value{absent: d.Bool()}
	if !v.absent {
		v.val = d.Bytes(s.valueSize)
	}
	r := d.Uvarint()
	if err := d.Done(); err != nil {
		return err
	}
	s.touch(key)
	reserve, a := r > 0, uint32(r-1)
	_, placed := s.where[key]
	switch exists := s.exists(key); {
	case !exists && v.absent:
		return fmt.Errorf("%w: a journaled delete of a missing key", errMalformed)
	case !exists && s.live >= s.capacity:
		return fmt.Errorf("%w: a journaled insert into a full store", errMalformed)
	case reserve != !placed:
		return fmt.Errorf("%w: a journaled write's address does not fit the key", errMalformed)
	case reserve && (r > uint64(len(s.slots)) || s.slots[a].held):
		// A free address in the batch in flight may be taken: the batch
		// moves the reservation with the element (commit).
		return fmt.Errorf("%w: a journaled insert takes an address that is not free", errMalformed)
	}
	s.apply(key, v, reserve, a)
	return nil
}

func (s *store) replayBatch(d *delta.Decoder) error {
	id, nReal, n := d.Uvarint(), d.Uvarint(), d.Count()
	addrs := make([]uint32, 0, n)
	for range n {
		a := d.Uvarint()
		d.Check(a < uint64(len(s.slots)), "address")
		addrs = append(addrs, uint32(a))
	}
	perm := make([]int, 0, n)
	for range n {
		perm = append(perm, int(d.Uvarint()))
	}
	if err := d.Done(); err != nil {
		return err
	}
	if s.retry != nil || id != s.next {
		return fmt.Errorf("%w: journaled batch %d follows a batch not committed, or the next batch is %d", errMalformed, id, s.next)
	}
	b, err := s.restoreBatch(id, addrs, perm, int(nReal))
	if err != nil {
		return err
	}
	for set, q := range s.queues { // as choose leaves them
		if rest := slices.DeleteFunc(q, func(k string) bool { return s.slots[s.where[k]].inflight }); len(rest) > 0 {
			s.queues[set] = rest
		} else {
			delete(s.queues, set)
		}
	}
	s.retry = b
	return nil
}

// restoreBatch takes addrs, in order, into a batch of id with permutation
// perm, as choose took them.
func (s *store) restoreBatch(id uint64, addrs []uint32, perm []int, nReal int) (*batch, error) {
	seen := make([]bool, len(addrs))
	for _, p := range perm {
		if p < 0 || p >= len(addrs) || seen[p] {
			return nil, fmt.Errorf("%w: a batch's permutation", errMalformed)
		}
		seen[p] = true
	}
	if len(perm) != len(addrs) || len(addrs) != s.opts.Beta {
		return nil, fmt.Errorf("%w: a batch of %d addresses; beta is %d", errMalformed, len(addrs), s.opts.Beta)
	}
	b := &batch{id: id, sent: map[uint32]value{}}
	for _, a := range addrs {
		if int(a) >= len(s.slots) || s.slots[a].inflight {
			return nil, fmt.Errorf("%w: a batch's address", errMalformed)
		}
		s.take(b, a)
	}
	b.perm, b.real = perm, nReal
	return b, nil
}

// replayWriteBack checks a write-back record: it is the batch in flight's
// (durable.Log.Replay redoes its Write).
func (s *store) replayWriteBack(d *delta.Decoder) error {
	id := d.Uvarint()
	if err := d.Done(); err != nil {
		return err
	}
	if s.retry == nil || s.retry.id != id {
		return fmt.Errorf("%w: the write-back of batch %d, which is not in flight", errMalformed, id)
	}
	return nil
}

func (s *store) replayCommit(d *delta.Decoder) error {
	id := d.Uvarint()
	b := s.retry
	if !d.Failed() && (b == nil || b.id != id) {
		return fmt.Errorf("%w: the commit of batch %d, which is not in flight", errMalformed, id)
	}
	var absent []byte
	if !d.Failed() {
		absent = d.Rest()
		d.Check(len(absent) == (len(b.addrs)+7)/8, "commit")
	}
	if err := d.Err(); err != nil {
		return err
	}
	// The elements as far as the commit looks at them: absent or not.
	// Their values are not kept; the cache is emptied after replay.
	elems := make([]value, len(b.addrs))
	for i, a := range b.addrs {
		if v, ok := b.sent[a]; ok {
			elems[i] = v
		}
		elems[i].absent = absent[i/8]&(1<<(i%8)) != 0
	}
	s.retry = nil
	s.commit(b, elems)
	return nil
}

// recover rebuilds the proxy's state from the journal
// (durable.Log.Replay): the last checkpoint, then the records after it. A
// batch left without its commit is sent again at the first tick. A bulk
// load cut short leaves an empty store, its layout written afresh. It
// ends with a checkpoint, so the next crash replays nothing of this one.
func (s *store) recover(ctx context.Context) error {
	if _, err := s.log.Replay(ctx, s); err != nil {
		return fmt.Errorf("cloak: %w", err)
	}
	if s.loadCut {
		s.loadCut = false
		if err := s.layout(ctx, nil); err != nil {
			return fmt.Errorf("cloak: rewriting the layout of an interrupted bulk load: %w", err)
		}
	}
	s.cache.reset()
	return s.checkpoint(ctx)
}

// checkpoint replaces the journal by the state; s.mu is held, and no batch
// is in flight but s.retry.
func (s *store) checkpoint(ctx context.Context) error {
	if !s.log.Durable() {
		return nil
	}
	if err := s.log.CheckpointOf(ctx, s); err != nil {
		return fmt.Errorf("cloak: %w", err)
	}
	s.sinceCheckpoint = 0
	return nil
}

// Snapshot implements durable.Machine: the state, a checkpoint's content.
func (s *store) Snapshot() ([]byte, error) {
	st := state{Budgets: s.budgets, Next: s.next, Clock: s.clock, Free: s.free, Live: s.live, Counters: s.counters}
	st.Slots = make([]slotState, len(s.slots))
	for a, sl := range s.slots {
		st.Slots[a] = slotState{Key: sl.key, Held: sl.held, LastBatch: sl.lastBatch, ClientTS: sl.clientTS}
	}
	// The writes waiting, those queued first, in their queues' order.
	added := map[string]bool{}
	add := func(k string) {
		if e := s.pending[k]; e != nil && e.write != nil && !added[k] {
			added[k] = true
			st.Pending = append(st.Pending, pendingWrite{Key: k, Val: e.write.val, Absent: e.write.absent})
		}
	}
	for _, set := range slices.Sorted(maps.Keys(s.queues)) {
		for _, k := range s.queues[set] {
			add(k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.pending)) {
		if s.pending[k].inflight {
			add(k)
		}
	}
	if b := s.retry; b != nil {
		r := &retryState{ID: b.id, Real: b.real, Addrs: b.addrs, Perm: b.perm}
		for _, a := range slices.Sorted(maps.Keys(b.sent)) {
			r.Sent = append(r.Sent, sentWrite{Addr: a, Val: b.sent[a].val, Absent: b.sent[a].absent})
		}
		st.Retry = r
	}
	var buf bytes.Buffer
	buf.WriteString(checkpointMagic)
	if err := gob.NewEncoder(&buf).Encode(st); err != nil {
		return nil, fmt.Errorf("cloak: encoding a checkpoint: %w", err)
	}
	return buf.Bytes(), nil
}

// Restore implements durable.Machine: it installs a checkpoint's state
// after checking it against the store's budgets.
func (s *store) Restore(plain []byte) error {
	if !bytes.HasPrefix(plain, []byte(checkpointMagic)) {
		return fmt.Errorf("the checkpoint has an unknown format")
	}
	var st state
	if err := gob.NewDecoder(bytes.NewReader(plain[len(checkpointMagic):])).Decode(&st); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	if !slices.Equal(st.Budgets, s.budgets) {
		return fmt.Errorf("%w: the store was written with budgets b_1=%d over %d sets (beta %d), the options give b_1=%d over %d sets (beta %d)",
			kv.ErrMismatch, first(st.Budgets), len(st.Budgets), sum(st.Budgets), first(s.budgets), len(s.budgets), sum(s.budgets))
	}
	if len(st.Slots) != s.addresses() || st.Live < 0 || st.Live > s.capacity {
		return fmt.Errorf("%w: %d addresses and %d keys", errMalformed, len(st.Slots), st.Live)
	}
	s.next, s.clock, s.live, s.counters = st.Next, st.Clock, st.Live, st.Counters
	s.slots, s.where, s.sets = make([]slot, len(st.Slots)), map[string]uint32{}, map[uint64][]uint32{}
	unheld := 0
	for i, ss := range st.Slots {
		a := uint32(i)
		s.slots[a] = slot{key: ss.Key, held: ss.Held, lastBatch: ss.LastBatch, clientTS: ss.ClientTS}
		s.sets[ss.LastBatch] = append(s.sets[ss.LastBatch], a)
		if !ss.Held {
			unheld++
		} else if _, dup := s.where[ss.Key]; dup {
			return fmt.Errorf("%w: a key at two addresses", errMalformed)
		} else {
			s.where[ss.Key] = a
		}
	}
	free := make([]bool, len(s.slots))
	for _, a := range st.Free {
		if int(a) >= len(s.slots) || s.slots[a].held || free[a] {
			return fmt.Errorf("%w: the free list", errMalformed)
		}
		free[a] = true
	}
	if len(st.Free) != unheld {
		return fmt.Errorf("%w: the free list", errMalformed)
	}
	s.free = slices.Clone(st.Free)
	for _, set := range s.sets {
		s.rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
	}
	if r := st.Retry; r != nil {
		if r.ID != s.next {
			return fmt.Errorf("%w: the batch to send again is %d, the next batch %d", errMalformed, r.ID, s.next)
		}
		b, err := s.restoreBatch(r.ID, r.Addrs, r.Perm, r.Real)
		if err != nil {
			return err
		}
		for _, w := range r.Sent {
			i := slices.Index(b.addrs, w.Addr)
			if i < 0 || !s.slots[w.Addr].held || len(w.Val) > s.valueSize {
				return fmt.Errorf("%w: a write of the batch to send again", errMalformed)
			}
			v := value{val: w.Val, absent: w.Absent}
			s.pending[s.slots[w.Addr].key] = &entry{sent: &v, inflight: true}
			b.sent[w.Addr] = v
		}
		s.retry = b
	}
	for _, p := range st.Pending {
		if _, ok := s.where[p.Key]; !ok || len(p.Val) > s.valueSize {
			return fmt.Errorf("%w: a saved write names a key with no address", kv.ErrTampered)
		}
		e := s.pending[p.Key]
		if e == nil {
			e = s.newEntry(p.Key)
		}
		e.write = &value{val: p.Val, absent: p.Absent}
	}
	return nil
}

// addresses returns the number of physical addresses, sum_d d*b_d: set d
// holds beta - sum_{i<d} b_i.
func (s *store) addresses() int {
	m, left := 0, sum(s.budgets)
	for _, b := range s.budgets {
		m, left = m+left, left-b
	}
	return m
}
