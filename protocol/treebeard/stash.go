package treebeard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// position is where a block lives: a tree and a leaf of it.
type position struct {
	Tree int
	Leaf uint64
}

// stashed is a block held in a Stash shard's stash.
type stashed struct {
	value    []byte
	evicting int // the tree whose eviction holds the block, or -1
	touched  int // accesses since the block was handed to that eviction
	// unjournaled: an epoch changed the block and its record is not in
	// the journal yet; no eviction takes it until then, so no eviction's
	// record holds a state the journal could lose.
	unjournaled bool
}

// inflight is a block whose real path read is on its way: the requests
// queued behind it, applied in arrival order when it returns, and the
// position it moves to then (the position map keeps the old one until
// the block is in the stash, so a journal record never holds a position
// the block has not reached).
type inflight struct {
	from, to position // where the read looks for it, and where it goes
	queue    []queued
}

type queued struct {
	req   *Request
	reply *Reply
	done  *sync.WaitGroup
}

// Stash is one Stash shard (Sec. 5.2): the position map and the stash of
// the blocks hashed to it, and the per-block request queues that make every
// key linearizable (Sec. 5.2.3: requests to a block are applied in the
// order the shard receives them).
type Stash struct {
	trees []PathReader // by tree: the ORAM shard that owns it
	geo   tree.Geometry
	quota *quota
	log   *durable.Log
	leak  leak // tests only (leak.go)

	mu       sync.Mutex
	rng      *rand.Rand
	pos      map[tree.BlockID]position
	stash    map[tree.BlockID]*stashed
	inflight map[tree.BlockID]*inflight
	stats    stashStats
}

type stashStats struct {
	realReads, fakeReads, stashHits, readErrors uint64
	stashMax                                    int
}

func newStash(geo tree.Geometry, q *quota, rng *rand.Rand) *Stash {
	return &Stash{geo: geo, quota: q, rng: rng,
		pos: map[tree.BlockID]position{}, stash: map[tree.BlockID]*stashed{},
		inflight: map[tree.BlockID]*inflight{}}
}

// connect gives the shard the owner of each tree.
func (s *Stash) connect(trees []PathReader) { s.trees = trees }

// randomPosition draws a uniformly random tree and leaf: the random tree
// and random path invariants (Sec. 3).
func (s *Stash) randomPosition() position {
	return position{Tree: s.rng.IntN(len(s.trees)), Leaf: s.rng.Uint64N(s.geo.Leaves())}
}

// pathRead is one read a batch sends to a tree.
type pathRead struct {
	read ringoram.PathRead
	real *inflight // the block's real read (read.Want is the block), or nil for a fake one
}

// Access runs a batch (Sec. 5.2.1): one path read per request. The first
// request of a block not in the stash reads the block's real path; repeats
// and blocks already stashed read a random path of a random tree (fake
// reads). Every access leaves its block at a fresh random tree and leaf
// (a repeat finds it moved already by the real read it queues behind).
// The reply to each request waits for its own batch's reads, and for the
// real read its block is queued behind.
func (s *Stash) Access(ctx context.Context, epoch uint64, batch []Request) []Reply {
	replies := make([]Reply, len(batch))
	var done sync.WaitGroup
	done.Add(len(batch))
	reads := s.plan(batch, replies, &done)
	results, errs := s.readAll(context.WithoutCancel(ctx), epoch, reads)
	s.settle(reads, results, errs, replies)
	done.Wait()
	if err := s.journal(batch); err != nil {
		for i := range replies {
			replies[i].Err = cmp.Or(replies[i].Err, err)
		}
	}
	return replies
}

// journal records where the blocks of the batch are now, and what the
// stashed ones hold, and waits until the record is durable: the replies
// leave only then (the records of concurrent epochs share an fsync). Every
// epoch writes one record, whatever it holds, so how many records there
// are depends only on the epochs.
func (s *Stash) journal(batch []Request) error {
	ids, seen := make([]tree.BlockID, 0, len(batch)), make(map[tree.BlockID]bool, len(batch))
	for _, r := range batch {
		if !seen[r.ID] {
			seen[r.ID] = true
			ids = append(ids, r.ID)
		}
	}
	s.mu.Lock()
	lsn := s.log.Append(s.blocksDelta(ids))
	for _, id := range ids {
		if b := s.stash[id]; b != nil {
			b.unjournaled = false
		}
	}
	s.mu.Unlock()
	if err := s.log.Sync(lsn); err != nil {
		return fmt.Errorf("treebeard: journal: %w", err)
	}
	return nil
}

// plan decides every request's read and applies what can be applied now.
func (s *Stash) plan(batch []Request, replies []Reply, done *sync.WaitGroup) [][]pathRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	reads := make([][]pathRead, len(s.trees)) // by tree
	fakeAt := func(p position) {
		reads[p.Tree] = append(reads[p.Tree], pathRead{read: ringoram.PathRead{Leaf: p.Leaf}})
		s.stats.fakeReads++
	}
	fake := func() { fakeAt(s.randomPosition()) }
	for i := range batch {
		r, rep := &batch[i], &replies[i]
		id := r.ID
		switch f, b := s.inflight[id], s.stash[id]; {
		case f != nil: // a repeat: queue behind the block's real read
			f.queue = append(f.queue, queued{r, rep, done})
			if s.leak == leakRepeatReadsRealPath {
				fakeAt(f.from)
				continue
			}
			fake()
		case b != nil: // in the stash: answer from it
			s.stats.stashHits++
			s.applyStashed(id, b, r, rep)
			done.Done()
			fake()
		default:
			p, ok := s.pos[id]
			if !ok { // a block that does not exist: a fake read, like any other
				s.applyNew(id, r, rep)
				done.Done()
				if s.leak == leakMissingKeyedPosition {
					fakeAt(s.keyedPosition(id))
					continue
				}
				fake()
				continue
			}
			f := &inflight{from: p, to: s.randomPosition(), queue: []queued{{r, rep, done}}}
			s.inflight[id] = f
			want := id
			reads[p.Tree] = append(reads[p.Tree], pathRead{read: ringoram.PathRead{Leaf: p.Leaf, Want: &want}, real: f})
			s.stats.realReads++
		}
	}
	return reads
}

// applyStashed applies r to a stashed block and remaps it.
func (s *Stash) applyStashed(id tree.BlockID, b *stashed, r *Request, rep *Reply) {
	if b.evicting >= 0 {
		b.touched++ // Sec. 5.2.2: the copy being evicted is now stale
	}
	exists, val := apply(r, rep, true, b.value, s.quota)
	if !exists {
		delete(s.stash, id)
		delete(s.pos, id)
		return
	}
	b.value, b.unjournaled = val, true
	s.pos[id] = s.randomPosition()
}

// applyNew applies r to a block that does not exist.
func (s *Stash) applyNew(id tree.BlockID, r *Request, rep *Reply) {
	if exists, val := apply(r, rep, false, nil, s.quota); exists {
		s.stash[id] = &stashed{value: val, evicting: -1, unjournaled: true}
		s.pos[id] = s.randomPosition()
		s.noteSize()
	}
}

func (s *Stash) noteSize() { s.stats.stashMax = max(s.stats.stashMax, len(s.stash)) }

// apply performs r on a block's state (exists, val) and returns the new
// state; q is charged for a new key and credited for a deleted one.
func apply(r *Request, rep *Reply, exists bool, val []byte, q *quota) (bool, []byte) {
	switch r.Op {
	case OpGet:
		rep.Found = exists
		if exists { // the caller owns its copy
			rep.Value = append([]byte{}, val...)
		}
	case OpPut:
		if !exists && !q.reserve() {
			rep.Err = fmt.Errorf("%w: %d keys", kv.ErrFull, q.capacity)
			return false, nil
		}
		return true, r.Value
	case OpDelete:
		if exists {
			q.release()
		}
		return false, nil
	}
	return exists, val
}

// readAll sends every tree this batch's reads of it, none for most trees
// of a small batch: a tree reads an epoch once every shard has sent its
// part, so which shards hold the epoch's keys never shows.
func (s *Stash) readAll(ctx context.Context, epoch uint64, reads [][]pathRead) ([][]ringoram.ReadResult, []error) {
	results, errs := make([][]ringoram.ReadResult, len(s.trees)), make([]error, len(s.trees))
	var wg sync.WaitGroup
	for t, rs := range reads {
		wg.Go(func() {
			prs := make([]ringoram.PathRead, len(rs))
			for i, r := range rs {
				prs[i] = r.read
			}
			results[t], errs[t] = s.trees[t].ReadPaths(ctx, t, epoch, prs)
			if errs[t] == nil && len(results[t]) != len(prs) {
				errs[t] = fmt.Errorf("treebeard: tree %d answered %d of %d reads", t, len(results[t]), len(prs))
			}
		})
	}
	wg.Wait()
	return results, errs
}

// settle applies the queued requests of every real read that returned and
// reports read failures to the requests of the batch.
func (s *Stash) settle(reads [][]pathRead, results [][]ringoram.ReadResult, errs []error, replies []Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, rs := range reads {
		if errs[t] != nil {
			s.stats.readErrors++
		}
		for i, r := range rs {
			if r.real == nil {
				continue
			}
			var res ringoram.ReadResult
			err := errs[t]
			if err == nil {
				if res = results[t][i]; !res.Found {
					err = fmt.Errorf("%w: a block is missing from its path", kv.ErrTampered)
				}
			}
			s.returned(*r.read.Want, r.real, res.Block.Value, err)
		}
	}
	// A request whose own (fake) read failed learns it, even if it was
	// answered from the stash: its outcome is unknown to its client. Fake
	// reads are tied to no request, so a failure fails the whole batch.
	if err := errors.Join(errs...); err != nil {
		for i := range replies {
			if replies[i].Err == nil {
				replies[i].Err = fmt.Errorf("treebeard: a path read of this epoch failed: %w", err)
			}
		}
	}
}

// returned ends block id's real read: with its value, its queued requests
// run in order and it joins the stash; on failure they fail and the block
// stays where it was.
func (s *Stash) returned(id tree.BlockID, f *inflight, val []byte, err error) {
	delete(s.inflight, id)
	if err != nil {
		for _, q := range f.queue {
			q.reply.Err = err
			q.done.Done()
		}
		return
	}
	exists := true
	for _, q := range f.queue {
		exists, val = apply(q.req, q.reply, exists, val, s.quota)
		q.done.Done()
	}
	if !exists {
		delete(s.pos, id)
		return
	}
	s.pos[id] = f.to
	s.stash[id] = &stashed{value: val, evicting: -1, unjournaled: true}
	s.noteSize()
}
