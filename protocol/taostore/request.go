package taostore

import "github.com/oblivkv/oblivkv/protocol/tree"

type opKind uint8

const (
	opGet opKind = iota
	opPut
	opDelete
)

// request is one logical request between arrival and reply: its entry in
// the request map, the response map and the sequencer.
type request struct {
	op      opKind
	id      tree.BlockID
	value   []byte // the value to write (opPut)
	leaf    uint64 // the path read for it
	arrival uint64 // its place in arrival order
	real    bool   // it reads its block's real path

	pathDone bool   // its own path read has returned (response map "b")
	answered bool   // its answer is known (response map "w")
	lsn      uint64 // the journal record that must be durable before its reply leaves
	done     chan struct{}

	// The answer.
	result []byte
	found  bool
	err    error
}

// complete reports whether r may be answered once the journal is durable
// up to durable.
func (r *request) complete(durable uint64) bool {
	return r.pathDone && r.answered && r.lsn <= durable
}

// apply performs the request on the block's current state (exists, val)
// and returns the new state. others is the number of other keys stored,
// for the capacity check of a Put of a new key.
func (r *request) apply(exists bool, val []byte, others, capacity int) (bool, []byte) {
	r.answered = true
	switch r.op {
	case opGet:
		r.found = exists
		if exists { // the caller owns its copy; stored values never change
			r.result = append([]byte{}, val...)
		}
	case opPut:
		if !exists && others >= capacity {
			r.err = errFull(capacity)
			return exists, val
		}
		return true, r.value
	case opDelete:
		return false, nil
	}
	return exists, val
}
