package treebeard

import (
	"errors"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The three layers talk only through the interfaces in this file, with
// plain values as messages, so a cluster can put RPCs between them without
// touching their logic (Sec. 4, Fig. 2).

// Op is the kind of a client request.
type Op uint8

// Client operations.
const (
	OpGet Op = iota
	OpPut
	OpDelete
)

// Request is one client request as a Router forwards it: the block it is
// about (a PRF of the key: Stash shards never see keys) and, for a Put,
// the value.
type Request struct {
	Op    Op
	ID    tree.BlockID
	Value []byte
}

// Reply answers one Request.
type Reply struct {
	Value []byte
	Found bool
	Status
}

// Status is how a call between layers ended: Code, and when it failed,
// Detail says why. No Go error crosses a layer boundary: what errors.Is
// can tell of a failure on the far side is its Code's kv error.
type Status struct {
	Code   Code
	Detail string
}

// Code is how a request ended.
type Code uint8

// Reply codes.
const (
	CodeOK          Code = iota
	CodeFull             // a new key, and the store holds its capacity (kv.ErrFull)
	CodeTampered         // storage answered with data that fails authentication (kv.ErrTampered)
	CodeClosed           // the store is closing (kv.ErrClosed)
	CodeUnavailable      // storage or the journal failed: a write's outcome is unknown
	CodeTransport        // the message or its reply was lost in transit: send it again
	CodeMismatch         // a state that does not fit the store's options (kv.ErrMismatch)
)

// failed returns the Reply of a request that ended with err.
func failed(err error) Reply { return Reply{Status: statusOf(err)} }

// statusOf returns the Status of a call that ended with err (nil: OK).
func statusOf(err error) Status {
	if err == nil {
		return Status{}
	}
	code := CodeUnavailable
	switch {
	case errors.Is(err, kv.ErrFull):
		code = CodeFull
	case errors.Is(err, kv.ErrTampered):
		code = CodeTampered
	case errors.Is(err, kv.ErrClosed), errors.Is(err, backend.ErrClosed):
		code = CodeClosed
	case errors.Is(err, kv.ErrMismatch):
		code = CodeMismatch
	}
	return Status{Code: code, Detail: err.Error()}
}

// Err returns the error s stands for, nil when the call succeeded: Detail
// as its message, and errors.Is matching the kv error of its Code.
func (s Status) Err() error {
	if s.Code == CodeOK {
		return nil
	}
	return statusError{s.Code, s.Detail}
}

// statusError is a failed Status as a Go error.
type statusError struct {
	code Code
	msg  string
}

func (e statusError) Error() string { return e.msg }

// Is makes errors.Is match the kv error of the code.
func (e statusError) Is(target error) bool {
	switch e.code {
	case CodeFull:
		return target == kv.ErrFull
	case CodeTampered:
		return target == kv.ErrTampered
	case CodeClosed:
		return target == kv.ErrClosed
	case CodeMismatch:
		return target == kv.ErrMismatch
	}
	return false
}

// StashShard is what a Router sees of the Stash layer (Sec. 5.2.1).
type StashShard interface {
	// Access runs a Router's batch of one epoch and returns a reply per
	// request, in order.
	Access(m AccessMsg) AccessReply
}

// PathReader is what a Stash shard sees of the ORAM layer: the owner of
// each tree reads paths for it (Sec. 5.3.1).
type PathReader interface {
	// ReadPaths reads one path of tree m.Tree per read, real or fake, and
	// returns the wanted blocks, in order. The tree reads an epoch once
	// every Stash shard's part of it is in (each shard sends every tree
	// one, empty or not).
	ReadPaths(m ReadPathsMsg) ReadPathsReply
}

// Stale names a copy of a block an eviction placed in a tree that was
// superseded while the eviction ran (the block was accessed meanwhile).
type Stale struct {
	Bucket uint64
	ID     tree.BlockID
}

// EvictionSource is what an ORAM shard sees of a Stash shard during an
// eviction (Sec. 5.2.2).
type EvictionSource interface {
	// EvictionBlocks hands over the stashed blocks assigned to the sending
	// tree that take part in no other eviction, and starts counting
	// accesses to them.
	EvictionBlocks(m EvictionBlocksMsg) EvictionBlocksReply
	// EvictionDone reports where each handed-over block was placed (its
	// bucket, or -1: nack). Acked blocks not accessed since the hand-off
	// leave the stash; acked blocks that were accessed stay, and their
	// copies in the tree are returned as stale.
	EvictionDone(m EvictionDoneMsg) EvictionDoneReply
}

// Admin is how the store reaches a Stash shard or an ORAM shard outside
// epochs: bulk loads, checkpoints, restores and stats go through it, never
// around it. (Journal replay is each layer's own.)
type Admin interface {
	Admin(m AdminMsg) AdminReply
}
