package ringoram

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
	"github.com/oblivkv/oblivkv/seal"
)

// An operation (a multi-path read, an eviction, or both in one round
// trip: Driver.ReadEvict) runs on a Tree as steps, and its caller does
// the I/O between them:
//
//  1. Start plans it and returns its Plan, to record before any Read.
//  2. MetaReads names the buckets whose metadata it must read (none when
//     the Tree has a copy of each); LearnMetas takes their plaintexts.
//  3. SlotReads names the slot lists of its ONE slot Read; LearnSlots
//     takes the real blocks they held and returns its Write and Change.
//  4. Commit once the Write landed (or was journaled), WriteFailed when
//     storage may or may not hold it, Discard to give it up unwritten.
//
// A step that fails ends the operation; so does Discard. Every step is a
// function of the Tree's state and its inputs alone.
//
// Several operations may be in progress at once: one may start while
// others wait for their slot Reads or their Writes (Beside), so that its
// Reads go to storage while theirs are out. Steps 1 to 3 up to SlotReads
// are the newest operation's; LearnSlots and step 4 are the oldest's, so
// operations end in the order they started. An operation starts beside
// others only when none of the buckets it reads below the top is one they
// rewrite whole, and at most one of them evicts; a bucket they read it
// plans on as they leave it (the slots they read are spent), and the top
// levels are taken from as each operation takes its slots (takeTopNow).
// So every operation reads the slots, writes the buckets and returns the
// results it would have had it started once the ones before it ended;
// storage sees the same calls, its Reads issued sooner.

// phase is where an operation is.
type phase uint8

const (
	phaseMeta  phase = iota + 1 // waiting for its metadata (MetaReads)
	phaseSlots                  // waiting for its slots (SlotReads)
	phaseWrite                  // waiting for its Write to land
)

// operation is an operation in progress. Its exported fields are the
// Tree's image's (image.go), with its source's state.
type operation struct {
	Phase  phase
	Plan   Plan
	Blocks []Block // offered to the eviction
	Access *access
	Cold   []int // indices into Access.Union whose metadata is read
	Write  Write // phaseWrite

	src *rand.ChaCha8 // its choices' source, seeded by Plan.Seed
	rng *rand.Rand    // drawing from src
}

// setSource makes src the source of op's choices.
func (op *operation) setSource(src *rand.ChaCha8) { op.src, op.rng = src, rand.New(src) }

// oldest returns the operation that started first of those in progress,
// if it is at phase ph, and makes its source the one steps draw from.
func (t *Tree) oldest(ph phase) *operation {
	if len(t.ops) == 0 || t.ops[0].Phase != ph {
		return nil
	}
	t.rng = t.ops[0].rng
	return t.ops[0]
}

// newest returns the operation that started last, if it is at phase ph,
// and makes its source the one steps draw from.
func (t *Tree) newest(ph phase) *operation {
	if len(t.ops) == 0 || t.ops[len(t.ops)-1].Phase != ph {
		return nil
	}
	op := t.ops[len(t.ops)-1]
	t.rng = op.rng
	return op
}

// end removes op from the operations in progress.
func (t *Tree) end(op *operation) {
	t.ops = slices.DeleteFunc(t.ops, func(o *operation) bool { return o == op })
}

// SlotRead is one slot an operation reads, with what its reader needs to
// open it and check it against the bucket's metadata: the version the
// bucket's slots were sealed with, and the real block the metadata lists
// in the slot (Real false: the slot must hold a dummy).
type SlotRead struct {
	Bucket      uint64
	Slot        uint8
	SlotVersion uint64
	Real        bool
	ID          tree.BlockID
}

// Write is what an operation writes, before sealing, in ONE atomic
// backend Write (Treebeard Sec. 5.3.3: a bucket's slots and metadata
// change together), with its Change and its answers.
type Write struct {
	Buckets []BucketWrite
	Change  Change
	Results []ReadResult // the multi-path read's, in request order
	Where   []int64      // per block offered: the bucket it was placed in, or -1
}

// BucketWrite is one bucket of a Write: its metadata record's plaintext
// and, for a full rewrite, its real blocks by slot (every other of its
// Z+S slots holds a dummy), all sealed under SlotVersion.
type BucketWrite struct {
	Bucket      uint64
	Version     uint64
	Meta        []byte
	Full        bool
	SlotVersion uint64
	Reals       []SlotBlock
}

// SlotBlock is a real block and the slot it is written to.
type SlotBlock struct {
	Slot  uint8
	Block tree.Block
}

// errNoOperation is a step called out of turn: its caller's fault.
var errNoOperation = fmt.Errorf("ringoram: no operation waits for this step")

// InProgress reports whether an operation has started and not ended.
func (t *Tree) InProgress() bool { return len(t.ops) > 0 }

// ErrBusy is Start's refusal of an operation that may not start beside
// those in progress (Beside); it changes nothing.
var ErrBusy = errors.New("ringoram: the operation may not start beside those in progress")

// Beside reports whether a multi-path read of reqs followed by an
// eviction of the next k paths may start now: no operation is in
// progress, or every one has chosen its slots, none of them rewrites
// whole a bucket below the top of its paths, and at most one of them all
// evicts; and none of those buckets is rewritten whole by unlanded,
// Writes not known to be on storage, or written by them and not copied
// (its metadata would be read from storage). It depends only on the
// leaves, k, the operations in progress and the Writes, all of which
// storage sees. A bucket an operation in progress reads and does not
// rewrite whole is read as that operation leaves it: its slots are
// chosen among those it did not read.
func (t *Tree) Beside(reqs []PathRead, k int, unlanded []BucketWrite) bool {
	a := t.paths(reqs, k)
	for _, w := range unlanded {
		if index(a.Union, w.Bucket) >= 0 && (w.Full || !t.cache.known[w.Bucket]) {
			return false
		}
	}
	return t.beside(a)
}

func (t *Tree) beside(a *access) bool {
	for _, op := range t.ops {
		if op.Phase == phaseMeta || a.K > 0 && op.Access.K > 0 || sharesBucket(a.Union, op.Access.rewritten()) {
			return false
		}
	}
	return true
}

// inFlight returns the metadata of bucket as the newest operation in
// progress that has chosen its slots (Access.Metas set, so never the
// one planning) and whose union holds it leaves it, and false when none
// does.
func (t *Tree) inFlight(bucket uint64) (meta, bool) {
	for i := len(t.ops) - 1; i >= 0; i-- {
		if a := t.ops[i].Access; a.Metas != nil {
			if j := index(a.Union, bucket); j >= 0 {
				return a.Metas[j].clone(), true
			}
		}
	}
	return meta{}, false
}

// sharesBucket reports whether two sorted lists of buckets share one.
func sharesBucket(a, b []uint64) bool {
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0] == b[0]:
			return true
		case a[0] < b[0]:
			a = a[1:]
		default:
			b = b[1:]
		}
	}
	return false
}

// Start begins a multi-path read of reqs followed by an eviction of the
// next k paths offered blocks, and returns its Plan: its choices are drawn
// from a fresh seed, or from the seed of the first plan Resume was given
// and no operation took yet. An operation with neither reads nor paths
// does nothing and starts nothing. With operations in progress it starts
// only beside them (Beside), or fails with ErrBusy.
func (t *Tree) Start(reqs []PathRead, k int, blocks []Block) (Plan, error) {
	if err := t.checkOperation(reqs, k, blocks); err != nil || len(reqs) == 0 && k == 0 {
		return Plan{}, err
	}
	a := t.paths(reqs, k)
	if !t.beside(a) {
		return Plan{}, ErrBusy
	}
	p := Plan{Reads: reqs, Evict: k}
	if len(t.resume) > 0 {
		r := t.resume[0]
		t.resume = t.resume[1:]
		if r.Evict != p.Evict || !slices.Equal(r.Reads, p.Reads) {
			return Plan{}, errNotResumed
		}
		p.Seed = r.Seed
	} else {
		p.Seed = random.Draw(t.seeds)
	}
	if len(t.ops) > 0 {
		t.besides++
	}
	op := &operation{Phase: phaseMeta, Plan: p, Blocks: blocks, Access: a}
	op.setSource(random.New(p.Seed))
	t.opSrc, t.rng = op.src, op.rng
	t.ops = append(t.ops, op)
	for i, b := range op.Access.Union {
		if _, ok := t.inFlight(b); !ok && !t.cache.known[b] {
			op.Cold = append(op.Cold, i)
		}
	}
	if len(op.Cold) == 0 {
		t.planSlots(op, nil)
	}
	return p, nil
}

// checkOperation refuses, before any I/O, an operation that cannot run.
func (t *Tree) checkOperation(reqs []PathRead, k int, blocks []Block) error {
	for _, r := range reqs {
		if r.Leaf >= t.g.Leaves() {
			return fmt.Errorf("ringoram: read of leaf %d in a tree of %d leaves", r.Leaf, t.g.Leaves())
		}
	}
	if k < 0 {
		return fmt.Errorf("ringoram: eviction of %d paths", k)
	}
	return t.checkBlocks(blocks)
}

// MetaReads returns the buckets whose metadata the newest operation
// must read, in ONE backend Read, before its slots: those the Tree has no
// copy of (metaCache). Which they are depends only on which buckets
// earlier operations touched since the Tree was made or restored.
func (t *Tree) MetaReads() []uint64 {
	op := t.newest(phaseMeta)
	if op == nil {
		return nil
	}
	out := make([]uint64, len(op.Cold))
	for j, i := range op.Cold {
		out[j] = op.Access.Union[i]
	}
	return out
}

// LearnMetas takes the plaintexts of the metadata records MetaReads named,
// in its order (opened by their reader, at any version), checks each
// against the version the Tree expects (an older one is a replay), keeps
// them, and chooses the slots the operation reads.
func (t *Tree) LearnMetas(plains [][]byte) error {
	op := t.newest(phaseMeta)
	if op == nil {
		return errNoOperation
	}
	if len(plains) != len(op.Cold) {
		t.end(op)
		return fmt.Errorf("ringoram: %d metadata records for %d buckets", len(plains), len(op.Cold))
	}
	metas := t.newMetas(len(op.Cold))
	for j, i := range op.Cold {
		if err := t.checkMeta(&metas[j], op.Access.Union[i], plains[j]); err != nil {
			t.end(op)
			return err
		}
	}
	t.stats.MetaReads += uint64(len(op.Cold))
	for j, i := range op.Cold {
		t.cache.put(op.Access.Union[i], &metas[j])
	}
	t.planSlots(op, metas)
	return nil
}

// checkMeta parses bucket's metadata plaintext into m and checks its
// version.
func (t *Tree) checkMeta(m *meta, bucket uint64, plain []byte) error {
	if err := m.parse(plain, t.p, t.g, bucket); err != nil {
		return fmt.Errorf("ringoram: metadata of bucket %d: %w", bucket, err)
	}
	if m.Version != t.versions[bucket] {
		return fmt.Errorf("%w: metadata of bucket %d has version %d, want %d (replayed)",
			seal.ErrTampered, bucket, m.Version, t.versions[bucket])
	}
	return nil
}

// planSlots chooses op's slots from the metadata of its union: cold,
// those just read (by Cold), the rest from the Tree's copies.
func (t *Tree) planSlots(op *operation, cold []meta) {
	metas := t.newMetas(len(op.Access.Union))
	j := 0
	for i, b := range op.Access.Union {
		if j < len(op.Cold) && op.Cold[j] == i {
			metas[i] = cold[j]
			j++
			continue
		}
		if m, ok := t.inFlight(b); ok { // as the operation before it leaves it
			metas[i] = m
			continue
		}
		t.cache.get(&metas[i], b, t.p, t.g)
	}
	t.slots(op.Access, op.Plan.Reads, metas)
	op.Phase = phaseSlots
}

// SlotReads returns the slot lists of the newest operation's ONE slot
// Read, all in one round trip (backend.Pipeline): the multi-path read's
// slots and then its reshuffles', and the eviction's, each when there is
// one.
func (t *Tree) SlotReads() [][]SlotRead {
	op := t.newest(phaseSlots)
	if op == nil {
		return nil
	}
	a := op.Access
	lists := a.lists()
	out := make([][]SlotRead, len(lists))
	for l, reads := range lists {
		out[l] = make([]SlotRead, len(reads))
		for j, r := range reads {
			m := &a.Checked[r.I]
			sr := SlotRead{Bucket: a.Union[r.I], Slot: r.Slot, SlotVersion: m.SlotVersion}
			if e := m.entryAt(r.Slot); e != nil {
				sr.Real, sr.ID = true, e.ID
			}
			out[l][j] = sr
		}
	}
	return out
}

// LearnSlots takes the real blocks the oldest operation's slot Read
// brought in, per list of SlotReads in order, one per slot marked Real
// (dummies bring nothing), and returns its Write: new metadata for every
// bucket of the union, the buckets due laid out afresh with their live
// blocks, and the eviction's buckets with the blocks placed in them. An
// operation started beside others takes its slots only once they ended.
func (t *Tree) LearnSlots(reals [][]tree.Block) (Write, error) {
	op := t.oldest(phaseSlots)
	if op == nil {
		return Write{}, errNoOperation
	}
	got, err := t.expand(op, reals)
	if err != nil {
		t.end(op)
		return Write{}, err
	}
	t.takeTopNow(op.Access, op.Plan.Reads)
	results := op.Access.answer(got[0])
	where, c, ws, err := t.rewrites(op.Access, got, op.Blocks)
	if err != nil {
		t.end(op)
		return Write{}, err
	}
	w := Write{Buckets: t.exportWrites(ws), Change: c, Results: results, Where: where}
	w.Change.Buckets = make([]BucketVersion, len(w.Buckets))
	for i, bw := range w.Buckets {
		w.Change.Buckets[i] = BucketVersion{Bucket: bw.Bucket, Version: bw.Version, Full: bw.Full}
	}
	op.Write, op.Phase = w, phaseWrite
	return w, nil
}

// expand lays the real blocks op read out by slot read, a zero Block for
// each dummy.
func (t *Tree) expand(op *operation, reals [][]tree.Block) ([][]tree.Block, error) {
	lists := op.Access.lists()
	if len(reals) != len(lists) {
		return nil, fmt.Errorf("ringoram: real blocks of %d slot lists for %d", len(reals), len(lists))
	}
	got := make([][]tree.Block, len(lists))
	for l, reads := range lists {
		got[l] = make([]tree.Block, len(reads))
		n := 0
		for j, r := range reads {
			e := op.Access.Checked[r.I].entryAt(r.Slot)
			if e == nil {
				continue
			}
			if n == len(reals[l]) || reals[l][n].ID != e.ID {
				return nil, fmt.Errorf("%w: slot %d of bucket %d disagrees with its metadata", seal.ErrTampered, r.Slot, op.Access.Union[r.I])
			}
			got[l][j] = reals[l][n]
			n++
		}
		if n != len(reals[l]) {
			return nil, fmt.Errorf("ringoram: %d real blocks for %d real slots", len(reals[l]), n)
		}
	}
	return got, nil
}

// exportWrites returns ws as BucketWrites. Their metadata plaintexts
// share one buffer, and their real blocks one slice.
func (t *Tree) exportWrites(ws []bucketWrite) []BucketWrite {
	size, reals := metaPlainSize(t.p.Z), 0
	for _, w := range ws {
		for _, b := range w.slots {
			if b != nil {
				reals++
			}
		}
	}
	out, plains, blocks := make([]BucketWrite, len(ws)), make([]byte, len(ws)*size), make([]SlotBlock, 0, reals)
	for i, w := range ws {
		bw := BucketWrite{Bucket: w.bucket, Version: w.meta.Version, Meta: w.meta.appendPlain(plains[i*size : i*size : (i+1)*size]),
			Full: w.slots != nil, SlotVersion: w.meta.SlotVersion}
		from := len(blocks)
		for s, b := range w.slots {
			if b != nil {
				blocks = append(blocks, SlotBlock{Slot: uint8(s), Block: *b})
			}
		}
		if len(blocks) > from {
			bw.Reals = blocks[from:len(blocks):len(blocks)]
		}
		out[i] = bw
	}
	return out
}

// Pending returns the Write of the oldest operation, which LearnSlots
// made and nothing has committed yet; the zero Write when there is none.
func (t *Tree) Pending() Write {
	if len(t.ops) == 0 || t.ops[0].Phase != phaseWrite {
		return Write{}
	}
	return t.ops[0].Write
}

// Commit ends the oldest operation, whose Write landed, or was journaled
// so that it will (Config.WriteAhead): the new versions and metadata are
// the Tree's, the stale copies of the buckets rewritten in full are gone,
// the top buckets hold their new contents, and the eviction counter
// advances.
func (t *Tree) Commit() error {
	op := t.oldest(phaseWrite)
	if op == nil {
		return errNoOperation
	}
	t.end(op)
	t.commit(op.Write.Buckets)
	if err := t.applyTop(op.Write.Change.Top); err != nil {
		return err
	}
	t.count(op.Access, len(op.Plan.Reads), op.Plan.Evict)
	return nil
}

// WriteFailed ends the oldest operation, whose Write storage failed:
// storage may hold it or not, so the Tree drops its copies of the
// buckets' metadata and the next operation reads them and checks.
func (t *Tree) WriteFailed() {
	if op := t.oldest(phaseWrite); op != nil {
		t.forgetCopies(op.Write.Buckets)
		t.end(op)
	}
}

// Discard ends the operation of plan p, which wrote nothing, if it is in
// progress (a step that failed ended it already): the Tree's state is as
// it was, but for the metadata it learned and the seed it drew. The
// other operations in progress go on.
func (t *Tree) Discard(p Plan) {
	t.ops = slices.DeleteFunc(t.ops, func(op *operation) bool { return op.Plan.Seed == p.Seed })
}

// commit installs the new versions of a successful Write and drops the
// stale entries of the buckets it rewrote in full.
func (t *Tree) commit(ws []BucketWrite) {
	for _, w := range ws {
		t.versions[w.Bucket] = w.Version
		t.cache.putPlain(w.Bucket, w.Meta)
		if w.Full {
			delete(t.stale, w.Bucket)
		}
	}
}

// forgetCopies drops the metadata copies of the buckets of a Write that
// failed: storage may have applied it, and the next read must check.
func (t *Tree) forgetCopies(ws []BucketWrite) {
	for _, w := range ws {
		t.cache.forget(w.Bucket)
	}
}
