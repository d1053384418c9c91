package treebeard

import (
	"encoding/binary"
	"fmt"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// routerCore is a Router's logic as a deterministic state machine: the
// requests of the epoch being collected, the number the epoch will have
// and the number the next request will have. Its inputs are requests
// (add) and the end of an epoch (cut); its outputs are each request's id
// and the epoch's number and batch per Stash shard. It keeps no state
// across epochs but their numbering and its requests', which is why a
// Router needs no journal (Treebeard Sec. 5.1.1: a request a Router loses
// is retried by its client): the numbering restarts at each open, and the
// store's incarnation, which request ids and MsgIDs carry, keeps them
// from repeating. Router drives it.
type routerCore struct {
	id         int // the Router's number: its requests' ids carry it
	shards     int
	next       uint64 // number of the collecting epoch
	requests   uint64 // number of the next request
	collecting []Request
}

// forwarded is an epoch as cut: its number, and for each Stash shard its
// batch and where each of the batch's requests came in the epoch.
type forwarded struct {
	Epoch   uint64
	Batches [][]Request
	Index   [][]int
}

// add names req (its RequestID, in the store's incarnation), collects it
// in the current epoch and returns its index there.
func (c *routerCore) add(req Request, incarnation uint64) int {
	req.Req = RequestID{Router: c.id, Incarnation: incarnation, Seq: c.requests}
	c.requests++
	c.collecting = append(c.collecting, req)
	return len(c.collecting) - 1
}

// size is the number of requests the current epoch holds.
func (c *routerCore) size() int { return len(c.collecting) }

// cut ends the collecting epoch: every Stash shard gets a batch of its own
// blocks in arrival order, empty or not (which shards the keys hash to
// must not change what the trees see). It reports false, and the epoch
// goes on, while no request came.
func (c *routerCore) cut() (forwarded, bool) {
	if len(c.collecting) == 0 {
		return forwarded{}, false
	}
	f := forwarded{Epoch: c.next, Batches: make([][]Request, c.shards), Index: make([][]int, c.shards)}
	for i, r := range c.collecting {
		s := shardOf(r.ID, c.shards)
		f.Batches[s] = append(f.Batches[s], r)
		f.Index[s] = append(f.Index[s], i)
	}
	c.collecting = nil
	c.next++
	return f, true
}

// shardOf maps a block to its Stash shard (static hash routing).
func shardOf(id tree.BlockID, shards int) int {
	return int(binary.BigEndian.Uint64(id[:8]) % uint64(shards))
}

// routerEntry is one input of a Router as a log holds it: a client
// request (taken in the store's Incarnation), or the end of the
// collecting epoch (Cut: its timer fired, or the Router closes).
type routerEntry struct {
	Cut         bool
	Req         Request
	Incarnation uint64
}

// routerOutput is what an entry makes a Router do: the request's index
// in its epoch, or the epoch cut (Forwarded, when Cut).
type routerOutput struct {
	Index     int
	Cut       bool
	Forwarded forwarded
}

// step applies entry e and returns its outputs.
func (c *routerCore) step(e routerEntry) routerOutput {
	if !e.Cut {
		return routerOutput{Index: c.add(e.Req, e.Incarnation)}
	}
	f, ok := c.cut()
	return routerOutput{Cut: ok, Forwarded: f}
}

// routerImage is a Router's whole state as a machine's snapshot holds it.
type routerImage struct {
	ID, Shards     int
	Next, Requests uint64
	Collecting     []Request
}

// image returns the Router's whole state, encoded.
func (c *routerCore) image() []byte {
	return encodeGob(routerImage{ID: c.id, Shards: c.shards, Next: c.next, Requests: c.requests, Collecting: c.collecting})
}

// restoreImage replaces the Router's whole state by one image returned.
func (c *routerCore) restoreImage(b []byte) error {
	var im routerImage
	if err := decodeGob(b, &im); err != nil {
		return fmt.Errorf("treebeard: decoding a Router's state: %w", err)
	}
	*c = routerCore{id: im.ID, shards: im.Shards, next: im.Next, requests: im.Requests, collecting: im.Collecting}
	return nil
}
