package taostore

import (
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// request is one logical request between arrival and reply: its entry in
// the request map, the response map and the sequencer.
type request struct {
	m       kv.Mutation // what it does to its block (its Arg the caller's copy)
	id      tree.BlockID
	key     string        // the block's name, kept if the request stores the block
	leaf    uint64        // the path read for it
	arrival uint64        // its place in arrival order
	real    bool          // it reads its block's real path
	plan    uint64        // its path read's number (plannedPath)
	planLSN uint64        // the journal record of its path read, durable before the read
	planned chan struct{} // closed once planLSN is durable, or the store stopped
	planErr error         // why the store stopped before planLSN was durable

	pathDone bool   // its own path read has returned (response map "b")
	answered bool   // its answer is known (response map "w")
	lsn      uint64 // the journal record that must be durable before its reply leaves
	done     chan struct{}

	// The answer.
	result kv.Result
	err    error
}

// complete reports whether r may be answered once the journal is durable
// up to durable.
func (r *request) complete(durable uint64) bool {
	return r.pathDone && r.answered && r.lsn <= durable
}

// apply runs the request's mutation on the block's current state
// (exists, val) and returns the new state. others is the number of other
// keys stored, for the capacity check of a new key. A mutation that fails
// leaves the state as it was.
func (r *request) apply(exists bool, val []byte, others, capacity, valueSize int) (bool, []byte) {
	r.answered = true
	next, after, res, err := r.m.Apply(val, exists, valueSize)
	if err == nil && after && !exists && others >= capacity {
		err = errFull(capacity)
	}
	if err != nil {
		r.err = err
		return exists, val
	}
	r.result = res
	return after, next
}
