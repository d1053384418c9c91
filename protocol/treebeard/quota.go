package treebeard

import "sync/atomic"

// quota counts the keys stored across all Stash shards against the
// store's capacity. In one process it is a shared counter.
type quota struct {
	used     atomic.Int64
	capacity int64
}

// reserve takes room for one new key, and reports false when the store is
// full.
func (q *quota) reserve() bool {
	for {
		u := q.used.Load()
		if u >= q.capacity {
			return false
		}
		if q.used.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

func (q *quota) release() { q.used.Add(-1) }
