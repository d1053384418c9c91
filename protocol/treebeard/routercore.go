package treebeard

import (
	"encoding/binary"

	"github.com/oblivkv/oblivkv/protocol/tree"
)

// routerCore is a Router's logic as a deterministic state machine: the
// requests of the epoch being collected and the number the epoch will
// have. Its inputs are requests (add) and the end of an epoch (cut); its
// output is the epoch's number and a batch per Stash shard. It keeps no
// state across epochs but their numbering, which is why a Router needs no
// journal (Treebeard Sec. 5.1.1: a request a Router loses is retried by
// its client). Router drives it.
type routerCore struct {
	shards     int
	next       uint64 // number of the collecting epoch
	collecting []Request
}

// forwarded is an epoch as cut: its number, and for each Stash shard its
// batch and where each of the batch's requests came in the epoch.
type forwarded struct {
	Epoch   uint64
	Batches [][]Request
	Index   [][]int
}

// add collects req in the current epoch and returns its index there.
func (c *routerCore) add(req Request) int {
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
