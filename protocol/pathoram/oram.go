package pathoram

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
)

// paths is the untrusted side of the ORAM as one access sees it: read the
// buckets of a path, write them back.
type paths interface {
	// planRead journals that the access to p.id is about to read the
	// path of p.leaf (journalRead), so that recovery finishes it, and
	// returns its record's LSN; awaitPlan waits until it is durable.
	planRead(p plannedRead) uint64
	awaitPlan(lsn uint64) error
	// readPath returns the real blocks of each bucket of path, root first,
	// read in one backend call.
	readPath(ctx context.Context, path []uint64) ([][]tree.Block, error)
	// writePath writes the buckets of path back in one atomic backend call,
	// contents[i] the blocks of path[i], after journaling the access that
	// made them (delta describes it: see journalDelta) and the path reads
	// planned ahead (their LSNs set in ahead). With handOff it returns the
	// write-back in flight, for the next access to issue once durable
	// (remote.writePath). When it returns, the contents are committed:
	// written, in flight, or (after an error) queued to be written before
	// any later read.
	writePath(ctx context.Context, path []uint64, contents [][]tree.Block, delta func() []byte, ahead []plannedRead, handOff bool) (*writeBack, error)
}

// entry is a block in the stash or in an access's working set, with the
// leaf it is assigned to.
type entry struct {
	id   tree.BlockID
	leaf uint64
	val  []byte
}

// result is what an access found and did.
type result struct {
	kv.Result
	full bool // a new key in a full store: nothing stored
	// named: the access stored a key whose name the state did not hold,
	// and added it (its journal record carries the name).
	named bool
	// rejected is the error of a mutation that does not apply to the
	// value: nothing changed, and the access ran all the same.
	rejected error
}

// oram is sequential Path ORAM (TaoStore Sec. IV-A) over a paths: the
// position map, the stash and the access algorithm. It is not safe for
// concurrent use; the store serialises accesses.
type oram struct {
	g         tree.Geometry
	z         int
	capacity  int
	valueSize int
	io        paths
	rng       *rand.ChaCha8
	flusher   *tree.Flusher
	leak      leak                               // tests only (leak.go)
	traced    func(leaf uint64, id tree.BlockID) // tests only: every path read planned (TestingKnobs.Trace)

	pos      map[tree.BlockID]uint64 // block -> assigned leaf
	names    map[tree.BlockID]string // block -> its key, for kv.KeyLister (a key an earlier build stored has none)
	stash    []entry
	stashMax int // high-water mark of the stash after a write-back
	// unfinished are the accesses whose path reads were planned and that
	// have not written back, in order: planned ahead for the accesses
	// whose turns come next (ahead set: storage has not seen the read,
	// and that access makes it), or one whose read failed or a crash cut
	// short: storage may have seen the read, so it is finished before
	// anything else reads (finishUnfinished).
	unfinished []plannedRead

	// scratch, reused by every access
	path     []uint64
	work     []entry
	leaves   []uint64
	levels   []int
	contents [][]tree.Block
}

func newORAM(g tree.Geometry, z, capacity, valueSize int, io paths, seed random.Seed) *oram {
	return &oram{g: g, z: z, capacity: capacity, valueSize: valueSize, io: io, rng: random.New(seed),
		flusher: tree.NewFlusher(g, z), pos: map[tree.BlockID]uint64{}, names: map[tree.BlockID]string{},
		contents: make([][]tree.Block, g.L+1)}
}

// randomLeaf returns a uniformly random leaf (the number of leaves is a
// power of two, so masking keeps it uniform).
func (o *oram) randomLeaf() uint64 { return o.rng.Uint64() & (o.g.Leaves() - 1) }

// plannedRead is an access's path read: the block and the leaf, and the
// leaf the access moves the block to, drawn when the read is planned, so
// that a read planned after it for the same block reads that leaf.
type plannedRead struct {
	id   tree.BlockID
	leaf uint64
	next uint64
	lsn  uint64 // its record's
	// ahead: journaled with an earlier access's write-back for an access
	// whose turn comes later, which storage has not seen read yet.
	ahead bool
}

// maxAhead bounds the path reads planned ahead: two, so that the next
// access's read is durable with the write-back before last, and that
// access reads while the last write-back's record is synced.
const maxAhead = 2

// upcomingAccess is an access whose turn comes later: its block, and
// whether it only reads it (a Get).
type upcomingAccess struct {
	block tree.BlockID
	read  bool
}

// upcoming tells the access running which accesses have their turns
// next, in order, up to n of them: as many as are known yet.
type upcoming func(n int) []upcomingAccess

// noneUpcoming is the upcoming of an access with none known after it.
func noneUpcoming(int) []upcomingAccess { return nil }

// access performs one Path ORAM access (TaoStore Sec. IV-A, steps 1-3):
// read the path of the block's leaf (a uniformly random leaf for a block
// not in the position map, so existence never leaks), answer from the path
// and the stash, remap the block to a fresh random leaf, flush greedily and
// write the path back. Every kind of operation makes the same calls. The
// unfinished accesses go first, unless the first is this one's read,
// planned ahead by an access before. key is the block's name, kept if the
// access stores it; next tells which accesses follow, and handOff whether
// the write-back may be left in flight for the next (see run).
func (o *oram) access(ctx context.Context, id tree.BlockID, key string, m kv.Mutation, next upcoming, handOff bool) (result, *writeBack, error) {
	if err := o.finishUnfinished(ctx, func(p plannedRead) bool { return p.ahead && p.id == id }); err != nil {
		return result{}, nil, err
	}
	if len(o.unfinished) == 0 {
		p := o.planFor(upcomingAccess{block: id, read: m.Op == kv.MutRead}, nil)
		p.lsn = o.io.planRead(p)
		o.planned(p)
	}
	if err := o.io.awaitPlan(o.unfinished[0].lsn); err != nil {
		return result{}, nil, err
	}
	return o.run(ctx, key, m, next, handOff)
}

// planFor chooses the path access a reads: the leaf the last access
// planned before it for the same block moves the block to, else the
// block's leaf, or a uniformly random one if the position map does not
// hold it. It draws the leaf the access moves the block to (nextLeaf).
func (o *oram) planFor(a upcomingAccess, before []plannedRead) plannedRead {
	leaf, known := o.pos[a.block]
	for _, p := range before {
		if p.id == a.block {
			leaf, known = p.next, true
		}
	}
	switch {
	case known:
	case o.leak == leakMissingKeyedLeaf:
		leaf = o.keyedLeaf(a.block)
	default:
		leaf = o.randomLeaf()
	}
	return plannedRead{id: a.block, leaf: leaf, next: o.nextLeaf(a, leaf)}
}

// nextLeaf draws the leaf access a moves its block to, having read
// leaf's path: a fresh uniformly random one (Sec. IV-A step 1).
func (o *oram) nextLeaf(a upcomingAccess, leaf uint64) uint64 {
	switch {
	case o.leak == leakGetKeepsLeaf && a.read:
		return leaf
	case o.leak == leakMissingKeyedLeaf && !o.mapped(a.block):
		return o.keyedLeaf(a.block)
	case o.leak == leakKeyedRemap || o.leak == leakChainedRemap:
		return o.leakedRemap(a.block, leaf)
	}
	return o.randomLeaf()
}

// planned makes p, journaled, the last unfinished access: it stays so
// until its write-back is committed.
func (o *oram) planned(p plannedRead) {
	o.unfinished = append(o.unfinished, p)
	if o.traced != nil {
		o.traced(p.leaf, p.id)
	}
}

// planAhead plans the path reads of the accesses next, which follow in
// that order, up to maxAhead unfinished after the access running, to be
// journaled with its write-back. The access running has changed the
// position map already; an access planned before for the same block
// gives the leaf it moves the block to (planFor), so reads are planned
// ahead whatever the keys, and when a read is planned tells storage
// nothing of them.
func (o *oram) planAhead(next []upcomingAccess) []plannedRead {
	before := o.unfinished[1:]
	for i, p := range before {
		if i >= len(next) || next[i].block != p.id {
			return nil // not the accesses planned: plan no more
		}
	}
	plans := slices.Clip(before) // appending copies: before stays as it is
	for _, a := range next[min(len(before), len(next)):] {
		p := o.planFor(a, plans)
		p.ahead = true
		plans = append(plans, p)
	}
	return plans[len(before):]
}

// finishUnfinished runs each unfinished access, up to the first that
// keep accepts, again as a read of its block, reading the same path:
// storage sees the read it may have seen repeated, then the write-back,
// which moves the block to the leaf planned.
// Left alone, the block would stay on that leaf, and the next access to
// it would read the path again, telling storage which access that was
// (the argument of Treebeard Sec. 5.3.3, for one path).
func (o *oram) finishUnfinished(ctx context.Context, keep func(plannedRead) bool) error {
	for len(o.unfinished) > 0 && !keep(o.unfinished[0]) {
		if err := o.io.awaitPlan(o.unfinished[0].lsn); err != nil {
			return err
		}
		if _, _, err := o.run(ctx, "", kv.Mutation{Op: kv.MutRead}, noneUpcoming, false); err != nil {
			return err
		}
	}
	return nil
}

// run is the access of the first unfinished access, p, named key,
// reading p.leaf's path, planned and journaled already: until its
// write-back is committed, it is unfinished. The write-back's record
// carries the path reads of the accesses next says follow, planned now;
// they are unfinished from then on. With handOff, and an access next,
// the write-back is left in flight (writePath) and returned.
func (o *oram) run(ctx context.Context, key string, m kv.Mutation, next upcoming, handOff bool) (result, *writeBack, error) {
	o.unfinished[0].ahead = false // storage may see the read from here on
	p := o.unfinished[0]
	_, known := o.pos[p.id]
	o.path = o.g.Path(p.leaf, o.path)
	buckets, err := o.io.readPath(ctx, o.path)
	if err != nil {
		return result{}, nil, err
	}
	o.gather(buckets)
	defer func() { clear(o.work) }()
	res, err := o.apply(p, key, known, m)
	if err != nil {
		return result{}, nil, err
	}
	o.flush(p.leaf)
	upcoming := next(maxAhead)
	ahead := o.planAhead(upcoming)
	w, err := o.io.writePath(ctx, o.path, o.contents, func() []byte { return o.journalDelta(p.leaf, p.id, res.named) }, ahead, handOff && len(upcoming) > 0)
	o.unfinished = slices.Delete(o.unfinished, 0, 1) // committed: written, in flight or queued (writePath)
	if err == nil {
		for _, a := range ahead {
			o.planned(a)
		}
	}
	for i := range o.contents {
		clear(o.contents[i])
		o.contents[i] = o.contents[i][:0]
	}
	return res, w, err
}

// gather fills the working set with the stash and the blocks read from the
// path. A block on the path that the position map does not know is
// dropped; no access leaves one (a deleted block goes with its position,
// and a failed bulk load stops the store), so it can only come from
// another store's buckets sealed with the same keys.
func (o *oram) gather(buckets [][]tree.Block) {
	o.work = append(o.work[:0], o.stash...)
	for _, bucket := range buckets {
		for _, b := range bucket {
			if leaf, ok := o.pos[b.ID]; ok {
				o.work = append(o.work, entry{id: b.ID, leaf: leaf, val: b.Value})
			}
		}
	}
}

// apply runs the mutation on the working set of p's access and, if the
// block exists afterwards, assigns it p.next, the fresh uniformly random
// leaf drawn when its read was planned (Sec. IV-A step 1); a write that
// stores the block keeps key as its name. It changes nothing when it
// fails.
func (o *oram) apply(p plannedRead, key string, known bool, m kv.Mutation) (result, error) {
	id := p.id
	i := o.find(id)
	if known && i < 0 {
		return result{}, fmt.Errorf("%w: block is neither on its path nor in the stash", kv.ErrTampered)
	}
	var old []byte
	if i >= 0 {
		old = o.work[i].val
	}
	next, exists, r, err := m.Apply(old, i >= 0, o.valueSize)
	res := result{Result: r, rejected: err}
	switch {
	case err != nil || !r.Written:
	case exists && i >= 0:
		o.work[i].val = bytes.Clone(next)
	case exists && len(o.pos) >= o.capacity:
		res = result{Result: kv.Result{}, full: true}
	case exists:
		o.work = append(o.work, entry{id: id, val: bytes.Clone(next)})
		i = len(o.work) - 1
	default:
		o.remove(i)
		delete(o.pos, id)
		delete(o.names, id)
		i = -1
	}
	if _, named := o.names[id]; i >= 0 && r.Written && !named {
		o.names[id], res.named = key, true
	}
	if i >= 0 {
		o.pos[id] = p.next
		o.work[i].leaf = p.next
	}
	return res, nil
}

// remove takes entry i out of the working set.
func (o *oram) remove(i int) {
	last := len(o.work) - 1
	o.work[i] = o.work[last]
	o.work[last] = entry{}
	o.work = o.work[:last]
}

func (o *oram) find(id tree.BlockID) int {
	for i := range o.work {
		if o.work[i].id == id {
			return i
		}
	}
	return -1
}

// flush places the working set on the path to leaf, each block in the
// deepest bucket with room that is also on its own path (Sec. IV-A step 2),
// into o.contents; the rest become the stash.
func (o *oram) flush(leaf uint64) {
	n := len(o.work)
	o.leaves = append(o.leaves[:0], make([]uint64, n)...)
	o.levels = append(o.levels[:0], make([]int, n)...)
	for i := range o.work {
		o.leaves[i] = o.work[i].leaf
	}
	o.flusher.Flush(leaf, o.leaves, o.levels)
	clear(o.stash)
	o.stash = o.stash[:0]
	for i, e := range o.work {
		if lvl := o.levels[i]; lvl >= 0 {
			o.contents[lvl] = append(o.contents[lvl], tree.Block{ID: e.id, Value: e.val})
		} else {
			o.stash = append(o.stash, e)
		}
	}
	o.stashMax = max(o.stashMax, len(o.stash))
}
