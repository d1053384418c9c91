package treebeard

import "sync/atomic"

// quota is a store's room for keys: its capacity, less the keys its Stash
// shards hold and the room they have taken for an epoch in progress. No
// shard decides against it while it runs an epoch: before planning a
// batch, the shard takes the room the batch may need (stashCore.roomNeeded)
// and hands its core what it got as part of the epoch's input; the core
// gives back the room the epoch did not use and the room deletions freed
// (stashCore.takeReleased). So whether a request is refused as full
// depends only on its shard's state and that input, and the store still
// holds exactly its capacity of keys (kv.ErrFull past it).
type quota struct {
	used     atomic.Int64
	capacity int64
}

// take reserves up to n keys' room and returns how much it got: less than
// n only when the store is nearly full.
func (q *quota) take(n int64) int64 {
	for {
		u := q.used.Load()
		got := min(n, max(0, q.capacity-u))
		if got == 0 || q.used.CompareAndSwap(u, u+got) {
			return got
		}
	}
}

// give returns n keys' room.
func (q *quota) give(n int64) { q.used.Add(-n) }
