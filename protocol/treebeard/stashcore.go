package treebeard

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/random"
)

// stashCore is a Stash shard's logic as a deterministic state machine: the
// position map, the keys' names, the stash, the blocks whose real reads
// are in flight, the requests applied (requestTable), the messages
// handled and their replies (msgTable), the replies of the epochs not
// yet durable and the random source they are drawn from. Its inputs are
// an epoch's batch (plan), the results of the paths read for it
// (returned), the end of the epoch (endEpoch) and its record's fate in
// the journal, an eviction's hand-off and acknowledgement and its
// senders' releases, each a
// stashEntry (step, stashmachine.go); its outputs are the path reads to
// issue, the epochs whose replies are ready, an epoch's journal record,
// and the reply to each message, encoded (a copy's: the stored one). It
// does no I/O, starts no goroutine and reads no clock: the same state
// (its random source included) and the same inputs give the same
// outputs. The room for new keys an epoch may use is an input of
// its plan, taken by the driver from the store's quota, and the room it
// did not use or freed is an output (takeReleased). A replicated log of
// its entries over an image (stashimage.go) rebuilds it; the journal
// holds its outputs instead (the positions drawn, the values), because
// recovery draws from fresh seeds (state). Stash drives it.
type stashCore struct {
	trees     int
	geo       tree.Geometry
	valueSize int   // the largest value a mutation may leave
	capacity  int64 // the store's, which a refusal as full names
	leak      leak  // tests only (leak.go)

	src      *rand.ChaCha8 // the random source, whose state snapshot holds
	rng      *rand.Rand
	pos      map[tree.BlockID]Position
	names    map[tree.BlockID]string // block -> its key, for kv.KeyLister (a key an earlier build stored has none)
	stash    map[tree.BlockID]*stashed
	inflight map[tree.BlockID]*inflight
	requests requestTable
	msgs     msgTable                 // the messages handled, and their replies
	epochs   map[uint64]*epochReplies // epochs whose records are not durable yet
	room     int64                    // new keys the epoch being planned may still add
	released int64                    // room given back, not yet taken by the driver (takeReleased)
	stats    stashStats
}

// Position is where a block lives: a tree and a leaf of it.
type Position struct {
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
	from, to Position // where the read looks for it, and where it goes
	queue    []queued
}

// queued is a request waiting for its block's real read.
type queued struct {
	req Request
	to  waiter
}

// waiter names a request awaiting its reply: its epoch and its index in
// the batch the shard got for that epoch.
type waiter struct {
	Epoch uint64
	Index int
}

// completion is a reply that is ready, and the request it answers.
type completion struct {
	To    waiter
	Reply Reply
}

// epochPlan is what plan decides for an epoch: the paths to read, by tree
// (a read whose Want is set is its block's real read), and the replies
// ready at once.
type epochPlan struct {
	Reads [][]ringoram.PathRead
	Done  []completion
}

type stashStats struct {
	realReads, fakeReads, stashHits uint64
	stashMax                        int
}

// newStashCore returns an empty shard over trees trees of geometry geo,
// drawing positions from a ChaCha8 source seeded with seed.
func newStashCore(trees int, geo tree.Geometry, capacity int64, valueSize int, seed [32]byte) *stashCore {
	c := &stashCore{trees: trees, geo: geo, capacity: capacity, valueSize: valueSize,
		pos: map[tree.BlockID]Position{}, names: map[tree.BlockID]string{}, stash: map[tree.BlockID]*stashed{},
		inflight: map[tree.BlockID]*inflight{}, requests: newRequestTable(), msgs: newMsgTable(), epochs: map[uint64]*epochReplies{}}
	c.reseed(seed)
	return c
}

// randomPosition draws a uniformly random tree and leaf: the random tree
// and random path invariants (Treebeard Sec. 3).
func (c *stashCore) randomPosition() Position {
	return Position{Tree: c.rng.IntN(c.trees), Leaf: c.rng.Uint64N(c.geo.Leaves())}
}

// moveFrom returns the position a block found at from moves to at an
// access: a fresh random tree and leaf, whatever the block and wherever it
// was (randomPosition).
func (c *stashCore) moveFrom(id tree.BlockID, from Position) Position {
	switch c.leak {
	case leakKeyedRemap:
		return c.keyedPosition(id)
	case leakRemapKeepsTree:
		return Position{Tree: from.Tree, Leaf: c.rng.Uint64N(c.geo.Leaves())}
	}
	return c.randomPosition()
}

// plan runs the start of an epoch (Treebeard Sec. 5.2.1): one path read
// per request. The first request of a block not in the stash reads the
// block's real path; repeats and blocks already stashed read a random path
// of a random tree (fake reads). Every access leaves its block at a fresh
// random tree and leaf (a repeat finds it moved already by the real read
// it queues behind). Requests answered from the stash, or about blocks
// that do not exist, are done at once; the others wait for their block's
// real read (returned). The epoch may add room new keys (the room its
// driver took for it, roomNeeded), and the slots of the keys it deletes;
// a new key past them is refused as full. What it does not use is
// released.
func (c *stashCore) plan(epoch uint64, batch []Request, room int64) epochPlan {
	c.room = room
	defer func() { c.released, c.room = c.released+c.room, 0 }()
	p := epochPlan{Reads: make([][]ringoram.PathRead, c.trees)}
	fakeAt := func(at Position) {
		p.Reads[at.Tree] = append(p.Reads[at.Tree], ringoram.PathRead{Leaf: at.Leaf})
		c.stats.fakeReads++
	}
	for i, r := range batch {
		to := waiter{Epoch: epoch, Index: i}
		c.requests.admit(epoch, r.Req)
		if done, copied := c.requests.copyOf(r.Req, to); copied { // applied once only: a fake read, like a repeat
			p.Done = append(p.Done, done...)
			fakeAt(c.randomPosition())
			continue
		}
		switch f, b := c.inflight[r.ID], c.stash[r.ID]; {
		case f != nil: // a repeat: queue behind the block's real read
			f.queue = append(f.queue, queued{req: r, to: to})
			if c.leak == leakRepeatReadsRealPath {
				fakeAt(f.from)
				continue
			}
			fakeAt(c.randomPosition())
		case b != nil: // in the stash: answer from it
			c.stats.stashHits++
			p.Done = c.requests.answer(r.Req, to, c.applyStashed(r, b), p.Done)
			fakeAt(c.randomPosition())
		default:
			at, ok := c.pos[r.ID]
			if !ok { // a block that does not exist: a fake read, like any other
				p.Done = c.requests.answer(r.Req, to, c.applyNew(r), p.Done)
				if c.leak == leakMissingKeyedPosition {
					fakeAt(c.keyedPosition(r.ID))
					continue
				}
				fakeAt(c.randomPosition())
				continue
			}
			c.inflight[r.ID] = &inflight{from: at, to: c.moveFrom(r.ID, at), queue: []queued{{req: r, to: to}}}
			p.Reads[at.Tree] = append(p.Reads[at.Tree], ringoram.PathRead{Leaf: at.Leaf, Want: r.ID, Real: true})
			c.stats.realReads++
		}
	}
	return p
}

// applyStashed applies r to a stashed block and remaps it.
func (c *stashCore) applyStashed(r Request, b *stashed) Reply {
	if b.evicting >= 0 {
		b.touched++ // Treebeard Sec. 5.2.2: the copy being evicted is now stale
	}
	rep, exists, val := c.apply(r, true, b.value, false)
	if !exists {
		c.forget(r.ID)
		return rep
	}
	c.nameIfStored(r, rep)
	b.value, b.unjournaled = val, true
	c.pos[r.ID] = c.moveFrom(r.ID, c.pos[r.ID])
	return rep
}

// applyNew applies r to a block that does not exist.
func (c *stashCore) applyNew(r Request) Reply {
	rep, exists, val := c.apply(r, false, nil, false)
	if exists {
		c.stash[r.ID] = &stashed{value: val, evicting: -1, unjournaled: true}
		c.pos[r.ID] = c.randomPosition()
		c.nameIfStored(r, rep)
		c.noteSize()
	}
	return rep
}

// nameIfStored keeps r's Name as its block's name when r carries one,
// stored the block (rep, its reply, says it wrote) and the shard holds no
// name for it.
func (c *stashCore) nameIfStored(r Request, rep Reply) {
	if _, named := c.names[r.ID]; r.Named && rep.Written && !named {
		c.names[r.ID] = r.Name
	}
}

func (c *stashCore) noteSize() { c.stats.stashMax = max(c.stats.stashMax, len(c.stash)) }

// apply performs r's mutation on a block's state (exists, val) and
// returns the reply and the new state. A new key takes a slot of the
// epoch's room, and a deleted one gives its slot to the room, unless the
// block keeps its own slot (ownSlot: the requests queued behind a real
// read, whose block had a key's slot when they were planned; settle
// releases it if the block ends deleted). A mutation that fails leaves
// the state.
func (c *stashCore) apply(r Request, exists bool, val []byte, ownSlot bool) (Reply, bool, []byte) {
	next, after, res, err := r.mutation().Apply(val, exists, c.valueSize)
	if err == nil && after && !exists && !ownSlot {
		if c.room == 0 {
			err = fmt.Errorf("%w: %d keys", kv.ErrFull, c.capacity)
		} else {
			c.room--
		}
	}
	if err != nil {
		return failed(err), exists, val
	}
	if exists && !after && !ownSlot {
		c.room++
	}
	return Reply{Result: res}, after, next
}

// roomNeeded returns the room for new keys batch may need: one slot for
// each block it names that does not exist (nor is being read) and that
// one of its requests may create. (A block the batch deletes gives the
// slot for its own creation again.)
func (c *stashCore) roomNeeded(batch []Request) int64 {
	seen := map[tree.BlockID]bool{}
	for _, r := range batch {
		_, exists := c.pos[r.ID]
		if exists || c.inflight[r.ID] != nil || seen[r.ID] || !mayCreate(r) {
			continue
		}
		seen[r.ID] = true
	}
	return int64(len(seen))
}

// mayCreate reports whether r may create its key.
func mayCreate(r Request) bool {
	switch r.Op {
	case OpGet, OpDelete:
		return false
	case OpPut:
		return r.If != kv.IfExists
	}
	return true
}

// takeReleased returns the room the shard gave back since it was last
// asked, for the store's quota.
func (c *stashCore) takeReleased() int64 {
	n := c.released
	c.released = 0
	return n
}

// returned takes the results of the path reads of tree t that plan asked
// for (err: the tree's read failed) and answers the requests queued
// behind each real read among them (applyResults). It also returns the
// read's failure (err, or a tree that answered fewer reads than asked),
// which fails the whole epoch: fake reads are tied to no request.
func (c *stashCore) returned(t int, reads []ringoram.PathRead, results []ringoram.ReadResult, err error) ([]completion, error) {
	e := resultsEntry(0, t, reads, results, err)
	return c.applyResults(e), e.Failure.Err()
}

// settle ends block id's real read.
func (c *stashCore) settle(id tree.BlockID, val []byte, err error, done []completion) []completion {
	f := c.inflight[id]
	if f == nil { // not a read of this shard's: nothing waits for it
		return done
	}
	delete(c.inflight, id)
	if err != nil {
		for _, q := range f.queue {
			done = c.requests.answer(q.req.Req, q.to, failed(err), done)
		}
		return done
	}
	exists := true
	for _, q := range f.queue {
		var rep Reply
		rep, exists, val = c.apply(q.req, exists, val, true)
		done = c.requests.answer(q.req.Req, q.to, rep, done)
		if exists {
			c.nameIfStored(q.req, rep)
		} else {
			delete(c.names, id)
		}
	}
	if !exists {
		delete(c.pos, id)
		c.released++
		return done
	}
	c.pos[id] = f.to
	c.stash[id] = &stashed{value: val, evicting: -1, unjournaled: true}
	c.noteSize()
	return done
}

// endEpoch returns the journal record of an epoch whose replies are all
// ready: where the blocks its batch named (named) are now, and what the
// stashed ones hold. Those blocks may join evictions from now on. Every
// epoch has a record, whatever it holds, so how many records there are
// depends only on the epochs.
func (c *stashCore) endEpoch(named []tree.BlockID) []byte {
	ids, seen := make([]tree.BlockID, 0, len(named)), make(map[tree.BlockID]bool, len(named))
	for _, id := range named {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if b := c.stash[id]; b != nil {
			b.unjournaled = false
		}
	}
	return c.blocksDelta(ids)
}

// evictionBlocks hands the ORAM shard of tree t the stashed blocks the
// position map assigns to t (Treebeard Sec. 5.2.2, Fig. 4 step 3). Each
// block takes part in one eviction at a time, and its access counter
// starts at zero. Blocks stay in the stash until the eviction acknowledges
// them. A block whose latest change is not journaled yet waits for the
// next eviction (which blocks an eviction places never shows on storage).
func (c *stashCore) evictionBlocks(t int) []ringoram.Block {
	var out []ringoram.Block
	for id, b := range c.stash {
		p := c.pos[id]
		if p.Tree != t || b.evicting >= 0 || b.unjournaled {
			continue
		}
		b.evicting, b.touched = t, 0
		out = append(out, ringoram.Block{Block: tree.Block{ID: id, Value: b.value}, Leaf: p.Leaf})
	}
	// In a fixed order, not the map's: the placements are the core's output.
	slices.SortFunc(out, func(x, y ringoram.Block) int { return bytes.Compare(x.Block.ID[:], y.Block.ID[:]) })
	return out
}

// evictionDone ends tree t's eviction (Treebeard Sec. 5.2.2): a block
// leaves the stash only if it was acked (placed) and not accessed since it
// was handed over. An acked block that was accessed meanwhile (updated,
// moved or deleted) stays as it is now, and its copy in the tree is stale.
func (c *stashCore) evictionDone(t int, ids []tree.BlockID, placed []int64) []Stale {
	var stale []Stale
	for i, id := range ids {
		b := c.stash[id]
		mine := b != nil && b.evicting == t
		if mine {
			b.evicting = -1
		}
		if placed[i] < 0 {
			continue
		}
		if mine && b.touched == 0 {
			delete(c.stash, id)
			continue
		}
		stale = append(stale, Stale{Bucket: uint64(placed[i]), ID: id})
	}
	return stale
}

// removed returns the blocks an eviction placed that left the stash: all
// placed but those whose copies are stale.
func removed(ids []tree.BlockID, placed []int64, stale []Stale) []tree.BlockID {
	var out []tree.BlockID
	for i, id := range ids {
		if placed[i] >= 0 && !slices.ContainsFunc(stale, func(st Stale) bool { return st.ID == id }) {
			out = append(out, id)
		}
	}
	return out
}

// takeBack stashes blocks tree t's reads took out whose epochs' records
// never came (a crash came between the tree's record and the shard's),
// each with the value read: a block still where the read found it (it
// exists, is not stashed, and its position is the read's) goes to the
// stash, there until an access moves it. Any other block has a record of
// the shard newer than the read (stashed, moved, deleted) and is left as
// it is, so a read handed back again, or after a later epoch rewrote the
// block, changes nothing; a block evicted again to the very leaf it was
// read from went back to tree t, which then forgot the read (oramMachine
// handovers). The stash and the position map thus hold every change of
// the read phase, as Treebeard Sec. 5.2.4 requires of a shard's replicas.
func (c *stashCore) takeBack(t int, blocks []ringoram.Block) {
	for _, b := range blocks {
		p, exists := c.pos[b.Block.ID]
		if _, stashed := c.stash[b.Block.ID]; exists && !stashed && p == (Position{Tree: t, Leaf: b.Leaf}) {
			c.setStashed(b.Block.ID, b.Block.Value)
		}
	}
}

// stashSnapshot is a Stash shard's state between epochs: no read in
// flight, no eviction holding a block.
type stashSnapshot struct {
	ShardBlocks
	Rand []byte // the random source's state
}

// snapshot returns the shard's state; it must run between epochs and
// evictions.
func (c *stashCore) snapshot() stashSnapshot {
	snap := stashSnapshot{ShardBlocks: c.blocks()}
	snap.Rand, _ = c.src.MarshalBinary() // never fails
	return snap
}

// blocks returns a copy of the shard's positions, stashed values and
// names: the store gathers every shard's to move them to other shards,
// with no random source (state).
func (c *stashCore) blocks() ShardBlocks {
	b := ShardBlocks{Pos: maps.Clone(c.pos), Stash: make(map[tree.BlockID][]byte, len(c.stash)), Names: maps.Clone(c.names)}
	for id, s := range c.stash {
		b.Stash[id] = s.value
	}
	return b
}

// restore replaces the shard's state by snap, which an earlier snapshot
// returned. A snapshot without a random source (a checkpoint's: state)
// leaves the shard's own.
func (c *stashCore) restore(snap stashSnapshot) error {
	if snap.Rand != nil {
		if err := c.src.UnmarshalBinary(snap.Rand); err != nil {
			return fmt.Errorf("treebeard: a Stash shard's random source: %w", err)
		}
	}
	clear(c.pos)
	clear(c.stash)
	clear(c.inflight)
	for id, p := range snap.Pos {
		c.setPosition(id, p)
	}
	c.names = maps.Clone(snap.Names)
	if c.names == nil {
		c.names = map[tree.BlockID]string{}
	}
	for id, v := range snap.Stash {
		c.setStashed(id, v)
	}
	return nil
}

// reseed draws the shard's positions from seed from now on.
func (c *stashCore) reseed(seed [32]byte) {
	c.src = random.New(seed)
	c.rng = rand.New(c.src)
}

// setPosition places block id at p (a load, a replayed record).
func (c *stashCore) setPosition(id tree.BlockID, p Position) { c.pos[id] = p }

// setStashed puts block id in the stash holding v, journaled.
func (c *stashCore) setStashed(id tree.BlockID, v []byte) {
	c.stash[id] = &stashed{value: v, evicting: -1}
	c.noteSize()
}

// setName names block id key (a replayed record).
func (c *stashCore) setName(id tree.BlockID, key string) { c.names[id] = key }

// forget removes block id: it does not exist.
func (c *stashCore) forget(id tree.BlockID) {
	delete(c.pos, id)
	delete(c.names, id)
	delete(c.stash, id)
}

// clearBlocks forgets every block (a bulk load cut short).
func (c *stashCore) clearBlocks() {
	clear(c.pos)
	clear(c.names)
	clear(c.stash)
}

// unstash takes block id out of the stash (an eviction placed it).
func (c *stashCore) unstash(id tree.BlockID) { delete(c.stash, id) }

// has reports whether block id exists, and whether it is stashed.
func (c *stashCore) has(id tree.BlockID) (exists, inStash bool) {
	_, exists = c.pos[id]
	_, inStash = c.stash[id]
	return exists, inStash
}
