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

// Op is the kind of a client request: a kv mutation, which the Stash
// shard applies to the block while it holds it, so that every kind costs
// one access.
type Op = kv.MutationOp

// The client operations every store has; kv.MutationOp has the others.
const (
	OpGet    = kv.MutRead
	OpPut    = kv.MutSet
	OpDelete = kv.MutDelete
)

// Request is one client request as a Router forwards it: its id (the
// Router's), the block it is about (a PRF of the key, by which the Stash
// shard finds it), the key itself when the request may store the block
// (Named and Name: the shard keeps each stored block's name, for
// kv.KeyLister; a Get or a Delete carries none, nor did an earlier
// build's requests) and the rest of its kv.Mutation (Value is the
// mutation's Arg).
type Request struct {
	Req       RequestID
	Op        Op
	ID        tree.BlockID
	Named     bool
	Name      string
	Value     []byte
	If        kv.Condition
	ReturnOld bool
}

// withName returns r carrying key as its Name, unless r's Op never
// stores a block.
func (r Request) withName(key string) Request {
	if r.Op != OpGet && r.Op != OpDelete {
		r.Named, r.Name = true, key
	}
	return r
}

// mutation returns the kv.Mutation r carries.
func (r Request) mutation() kv.Mutation {
	return kv.Mutation{Op: r.Op, Arg: r.Value, If: r.If, ReturnOld: r.ReturnOld}
}

// Reply answers one Request: its kv.Result (a Get's value is Old).
type Reply struct {
	kv.Result
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
	CodeUnavailable      // storage or the journal failed: a write's outcome is unknown (kv.ErrUnavailable)
	CodeTransport        // the message or its reply was lost in transit: send it again
	CodeMismatch         // a state that does not fit the store's options (kv.ErrMismatch)
	CodeNotInteger       // an increment of a value that is not an integer (kv.ErrNotInteger)
	CodeNotFloat         // a float increment of a value that is not a number (kv.ErrNotFloat)
	CodeOverflow         // an increment past the int64 range (kv.ErrOverflow)
	CodeNotFinite        // a float increment to NaN or an infinity (kv.ErrNotFinite)
	CodeTooLarge         // an append past the value size (kv.ErrValueTooLarge)
	CodeFenced           // storage refused a write: a later open of the store has written since (kv.ErrFenced)
)

// codeErrors pairs each Code that stands for a kv error with that error.
var codeErrors = []struct {
	code Code
	err  error
}{
	{CodeFull, kv.ErrFull}, {CodeTampered, kv.ErrTampered}, {CodeClosed, kv.ErrClosed},
	{CodeClosed, backend.ErrClosed}, {CodeMismatch, kv.ErrMismatch},
	{CodeNotInteger, kv.ErrNotInteger}, {CodeNotFloat, kv.ErrNotFloat},
	{CodeOverflow, kv.ErrOverflow}, {CodeNotFinite, kv.ErrNotFinite},
	{CodeTooLarge, kv.ErrValueTooLarge}, {CodeFenced, kv.ErrFenced},
	{CodeUnavailable, kv.ErrUnavailable},
}

// failed returns the Reply of a request that ended with err.
func failed(err error) Reply { return Reply{Status: statusOf(err)} }

// statusOf returns the Status of a call that ended with err (nil: OK).
func statusOf(err error) Status {
	if err == nil {
		return Status{}
	}
	code := CodeUnavailable
	for _, ce := range codeErrors {
		if errors.Is(err, ce.err) {
			code = ce.code
			break
		}
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
	for _, ce := range codeErrors {
		if ce.code == e.code && ce.err == target {
			return true
		}
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
