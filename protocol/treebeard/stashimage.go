package treebeard

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// stashImage is a Stash shard's whole state as a machine's snapshot holds
// it, valid at any point between two entries (reads in flight, epochs
// half answered, blocks held by evictions): every map as a slice sorted by
// its key, so that equal states encode to equal bytes.
type stashImage struct {
	Rand     []byte
	Blocks   []imageBlock
	Inflight []imageInflight
	Replies  []imageReply  // requestTable.replies
	Copies   []imageCopies // requestTable.copies
	Batches  []imageBatch  // requestTable.batches
	Epochs   []imageEpoch
	Messages []imageStream // msgTable
	Released int64
	Stats    [4]uint64 // real reads, fake reads, stash hits, the stash's largest size
}

type imageBlock struct {
	ID                tree.BlockID
	At                Position
	Named             bool // Name is the block's key
	Name              string
	Stashed           bool
	Value             []byte
	Evicting, Touched int
	Unjournaled       bool
}

type imageInflight struct {
	ID       tree.BlockID
	From, To Position
	Queue    []imageQueued
}

type imageQueued struct {
	Req Request
	To  waiter
}

type imageReply struct {
	ID    RequestID
	Reply Reply
}

type imageCopies struct {
	ID RequestID
	To []waiter
}

type imageBatch struct {
	Epoch uint64
	IDs   []RequestID
}

type imageEpoch struct {
	Epoch   uint64
	Replies epochReplies
}

func compareRequestIDs(a, b RequestID) int {
	return cmp.Or(cmp.Compare(a.Router, b.Router), cmp.Compare(a.Incarnation, b.Incarnation), cmp.Compare(a.Seq, b.Seq))
}

func sortedIDs[V any](m map[tree.BlockID]V) []tree.BlockID {
	return slices.SortedFunc(maps.Keys(m), func(a, b tree.BlockID) int { return bytes.Compare(a[:], b[:]) })
}

// image returns the shard's whole state, encoded.
func (c *stashCore) image() []byte {
	var im stashImage
	im.Rand, _ = c.src.MarshalBinary() // never fails
	for _, id := range sortedIDs(c.pos) {
		b := imageBlock{ID: id, At: c.pos[id]}
		b.Name, b.Named = c.names[id]
		if s := c.stash[id]; s != nil {
			b.Stashed, b.Value, b.Evicting, b.Touched, b.Unjournaled = true, s.value, s.evicting, s.touched, s.unjournaled
		}
		im.Blocks = append(im.Blocks, b)
	}
	for _, id := range sortedIDs(c.inflight) {
		f := c.inflight[id]
		in := imageInflight{ID: id, From: f.from, To: f.to}
		for _, q := range f.queue {
			in.Queue = append(in.Queue, imageQueued{Req: q.req, To: q.to})
		}
		im.Inflight = append(im.Inflight, in)
	}
	for _, id := range slices.SortedFunc(maps.Keys(c.requests.replies), compareRequestIDs) {
		im.Replies = append(im.Replies, imageReply{ID: id, Reply: c.requests.replies[id]})
	}
	for _, id := range slices.SortedFunc(maps.Keys(c.requests.copies), compareRequestIDs) {
		im.Copies = append(im.Copies, imageCopies{ID: id, To: c.requests.copies[id]})
	}
	for _, e := range slices.Sorted(maps.Keys(c.requests.batches)) {
		im.Batches = append(im.Batches, imageBatch{Epoch: e, IDs: c.requests.batches[e]})
	}
	for _, e := range slices.Sorted(maps.Keys(c.epochs)) {
		im.Epochs = append(im.Epochs, imageEpoch{Epoch: e, Replies: *c.epochs[e]})
	}
	im.Messages = c.msgs.image()
	im.Released = c.released
	im.Stats = [4]uint64{c.stats.realReads, c.stats.fakeReads, c.stats.stashHits, uint64(c.stats.stashMax)}
	return encodeGob(im)
}

// restoreImage replaces the shard's whole state by one image returned.
func (c *stashCore) restoreImage(b []byte) error {
	var im stashImage
	if err := decodeGob(b, &im); err != nil {
		return fmt.Errorf("treebeard: decoding a Stash shard's state: %w", err)
	}
	if err := c.src.UnmarshalBinary(im.Rand); err != nil {
		return fmt.Errorf("treebeard: a Stash shard's random source: %w", err)
	}
	c.clearState()
	for _, b := range im.Blocks {
		c.pos[b.ID] = b.At
		if b.Named {
			c.names[b.ID] = b.Name
		}
		if b.Stashed {
			c.stash[b.ID] = &stashed{value: b.Value, evicting: b.Evicting, touched: b.Touched, unjournaled: b.Unjournaled}
		}
	}
	for _, in := range im.Inflight {
		f := &inflight{from: in.From, to: in.To}
		for _, q := range in.Queue {
			f.queue = append(f.queue, queued{req: q.Req, to: q.To})
		}
		c.inflight[in.ID] = f
	}
	for _, r := range im.Replies {
		c.requests.replies[r.ID] = r.Reply
	}
	for _, cp := range im.Copies {
		c.requests.copies[cp.ID] = cp.To
	}
	for _, bt := range im.Batches {
		c.requests.batches[bt.Epoch] = bt.IDs
	}
	for _, e := range im.Epochs {
		c.epochs[e.Epoch] = &e.Replies
	}
	c.msgs = msgTableOf(im.Messages)
	c.released, c.room = im.Released, 0
	c.stats = stashStats{realReads: im.Stats[0], fakeReads: im.Stats[1], stashHits: im.Stats[2], stashMax: int(im.Stats[3])}
	return nil
}

// stashCheckpoint is a Stash shard's durable state, its machine's
// checkpoint: where its blocks are, their names (none in an earlier
// build's checkpoint) and what the stashed ones hold, and
// the trees' eviction messages it handled (msgTable), so that the end of
// an eviction a tree sends again after a crash gets the reply it got
// before instead of being applied twice. Nothing else is kept: the
// requests of epochs not journaled were never answered (their clients
// retry them, Treebeard Sec. 5.1.2), a block a read in flight took out of
// its tree comes back from that tree's log (takeBack), and a store
// opened again draws from fresh seeds (state).
type stashCheckpoint struct {
	Blocks   []checkpointBlock // by ID
	Messages []imageStream     // the trees' streams
}

type checkpointBlock struct {
	ID      tree.BlockID
	At      Position
	Named   bool // Name is the block's key
	Name    string
	Stashed bool
	Value   []byte
}

// checkpointState returns the shard's durable state, sharing no memory
// the shard changes (a stashed value is replaced, never changed), its
// blocks in no order: encode sorts them, outside the shard's lock.
func (c *stashCore) checkpointState() checkpointState {
	cp := stashCheckpoint{Blocks: make([]checkpointBlock, 0, len(c.pos))}
	for id, at := range c.pos {
		b := checkpointBlock{ID: id, At: at}
		b.Name, b.Named = c.names[id]
		if s := c.stash[id]; s != nil {
			b.Stashed, b.Value = true, s.value
		}
		cp.Blocks = append(cp.Blocks, b)
	}
	for _, s := range c.msgs.image() {
		if s.Stream.Sender.Layer == LayerORAM {
			cp.Messages = append(cp.Messages, s)
		}
	}
	return cp
}

// checkpoint returns the shard's durable state, encoded.
func (c *stashCore) checkpoint() []byte { return c.checkpointState().encode() }

// encode sorts the blocks by ID and encodes the checkpoint.
func (cp stashCheckpoint) encode() []byte {
	slices.SortFunc(cp.Blocks, func(a, b checkpointBlock) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return encodeGob(cp)
}

// clearState forgets every block, read in flight, epoch and request.
func (c *stashCore) clearState() {
	clear(c.pos)
	clear(c.names)
	clear(c.stash)
	clear(c.inflight)
	clear(c.epochs)
	c.requests = newRequestTable()
}

// restoreCheckpoint replaces the shard's state by a checkpoint's, its
// blocks all journaled and held by no eviction; the random source stays
// the shard's own.
func (c *stashCore) restoreCheckpoint(b []byte) error {
	var cp stashCheckpoint
	if err := decodeGob(b, &cp); err != nil {
		return fmt.Errorf("%w: decoding a Stash shard's checkpoint: %v", kv.ErrTampered, err)
	}
	c.clearState()
	for _, b := range cp.Blocks {
		if b.At.Tree < 0 || b.At.Tree >= c.trees || b.At.Leaf >= c.geo.Leaves() {
			return fmt.Errorf("%w: a block's position is outside the trees", kv.ErrMismatch)
		}
		c.setPosition(b.ID, b.At)
		if b.Named {
			c.setName(b.ID, b.Name)
		}
		if b.Stashed {
			c.setStashed(b.ID, b.Value)
		}
	}
	c.msgs = msgTableOf(cp.Messages)
	c.released, c.room = 0, 0
	return nil
}
