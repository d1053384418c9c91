package pathoram

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
)

// paths is the untrusted side of the ORAM as one access sees it: read the
// buckets of a path, write them back.
type paths interface {
	// planRead records, durably, that the access to block id is about to
	// read the path of leaf (journalRead), so that recovery finishes it.
	planRead(ctx context.Context, leaf uint64, id tree.BlockID) error
	// readPath returns the real blocks of each bucket of path, root first,
	// read in one backend call.
	readPath(ctx context.Context, path []uint64) ([][]tree.Block, error)
	// writePath writes the buckets of path back in one atomic backend call,
	// contents[i] the blocks of path[i], after journaling the access that
	// made them (delta describes it: see journalDelta) and, if ahead is
	// not nil, the next access's path read, both made durable together
	// (group commit). When it returns, the contents are committed:
	// written, or (after an error) queued to be written before any later
	// read.
	writePath(ctx context.Context, path []uint64, contents [][]tree.Block, delta func() []byte, ahead *plannedRead) error
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
	// unfinished is the access whose path read was planned and that has
	// not written back: planned ahead for the next access (its ahead
	// set: storage has not seen the read, and that access makes it), or
	// one whose read failed or a crash cut short: storage may have seen
	// the read, so it is finished before anything else reads
	// (finishUnfinished).
	unfinished *plannedRead

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

// plannedRead is an access's path read: the block and the leaf.
type plannedRead struct {
	id   tree.BlockID
	leaf uint64
	// ahead: journaled with the previous access's write-back for the
	// access whose turn came next, which storage has not seen read yet.
	ahead bool
}

// nextAccess tells the access running which block the next access is
// for, if it is known yet.
type nextAccess func() (tree.BlockID, bool)

// noNext is the nextAccess of an access with none known after it.
func noNext() (tree.BlockID, bool) { return tree.BlockID{}, false }

// access performs one Path ORAM access (TaoStore Sec. IV-A, steps 1-3):
// read the path of the block's leaf (a uniformly random leaf for a block
// not in the position map, so existence never leaks), answer from the path
// and the stash, remap the block to a fresh random leaf, flush greedily and
// write the path back. Every kind of operation makes the same calls. An
// unfinished access goes first, unless it is this one's read, planned
// ahead by the access before. key is the block's name, kept if the access
// stores it; next tells which access follows (see run).
func (o *oram) access(ctx context.Context, id tree.BlockID, key string, m kv.Mutation, next nextAccess) (result, error) {
	if u := o.unfinished; u != nil && u.ahead && u.id == id {
		return o.run(ctx, *u, key, m, next)
	}
	if err := o.finishUnfinished(ctx); err != nil {
		return result{}, err
	}
	p := o.planFor(id)
	if err := o.io.planRead(ctx, p.leaf, p.id); err != nil {
		return result{}, err
	}
	o.planned(p)
	return o.run(ctx, p, key, m, next)
}

// planFor chooses the path the access to block id reads: its leaf, or a
// uniformly random one if the position map does not hold it.
func (o *oram) planFor(id tree.BlockID) plannedRead {
	leaf, known := o.pos[id]
	switch {
	case known:
	case o.leak == leakMissingKeyedLeaf:
		leaf = o.keyedLeaf(id)
	default:
		leaf = o.randomLeaf()
	}
	return plannedRead{id: id, leaf: leaf}
}

// planned makes p, journaled, the unfinished access: it stays so until
// its write-back is committed.
func (o *oram) planned(p plannedRead) {
	o.unfinished = &p
	if o.traced != nil {
		o.traced(p.leaf, p.id)
	}
}

// planAhead plans the path read of the access next says follows, if
// any, to be journaled with this access's write-back.
func (o *oram) planAhead(next nextAccess) *plannedRead {
	id, ok := next()
	if !ok {
		return nil
	}
	p := o.planFor(id)
	p.ahead = true
	return &p
}

// finishUnfinished runs the unfinished access again as a read of its
// block, reading the same path: storage sees the read it may have seen
// repeated, then the write-back, which moves the block to a fresh leaf.
// Left alone, the block would stay on that leaf, and the next access to
// it would read the path again, telling storage which access that was
// (the argument of Treebeard Sec. 5.3.3, for one path).
func (o *oram) finishUnfinished(ctx context.Context) error {
	if o.unfinished == nil {
		return nil
	}
	_, err := o.run(ctx, *o.unfinished, "", kv.Mutation{Op: kv.MutRead}, noNext)
	return err
}

// run is the access of p.id, named key, reading p.leaf's path, planned
// and journaled already: until its write-back is committed, it is the
// unfinished access. The write-back's record carries the path read of
// the access next says follows, planned now (group commit: the two are
// made durable by one fsync, and that access reads without one of its
// own); it is the unfinished access from then on.
func (o *oram) run(ctx context.Context, p plannedRead, key string, m kv.Mutation, next nextAccess) (result, error) {
	p.ahead = false // storage may see the read from here on
	o.unfinished = &p
	_, known := o.pos[p.id]
	o.path = o.g.Path(p.leaf, o.path)
	buckets, err := o.io.readPath(ctx, o.path)
	if err != nil {
		return result{}, err
	}
	o.gather(buckets)
	defer func() { clear(o.work) }()
	res, err := o.apply(p, key, known, m)
	if err != nil {
		return result{}, err
	}
	o.flush(p.leaf)
	ahead := o.planAhead(next)
	err = o.io.writePath(ctx, o.path, o.contents, func() []byte { return o.journalDelta(p.leaf, p.id, res.named) }, ahead)
	o.unfinished = nil // committed: written, or queued (writePath)
	if ahead != nil && err == nil {
		o.planned(*ahead) // else the next access plans its read again
	}
	for i := range o.contents {
		clear(o.contents[i])
		o.contents[i] = o.contents[i][:0]
	}
	return res, err
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
// block exists afterwards, assigns it a fresh uniformly random leaf (Sec.
// IV-A step 1); a write that stores the block keeps key as its name. It
// changes nothing when it fails.
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
	if i >= 0 && !(o.leak == leakGetKeepsLeaf && m.Op == kv.MutRead) {
		leaf := o.randomLeaf()
		if o.leak == leakKeyedRemap || o.leak == leakChainedRemap {
			leaf = o.leakedRemap(id, p.leaf)
		}
		o.pos[id] = leaf
		o.work[i].leaf = leaf
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
