package treebeard

import (
	"bytes"
	"context"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// requests is the kv.Store calls of a store whose Routers are reached
// through send: each call one Request, about its key's block (a PRF of
// the key), with the key's name when it may store the block (withName).
// The store in one process and a cluster's router share it.
type requests struct {
	keys *seal.Keys
	send func(context.Context, Request) (Reply, error)
}

func (q requests) id(key string) tree.BlockID { return tree.IDOf(q.keys, key) }

func (q requests) Get(ctx context.Context, key string) ([]byte, bool, error) {
	rep, err := q.send(ctx, Request{Op: OpGet, ID: q.id(key)})
	return rep.Old, rep.Found, err
}

// Update applies m in the one access a Get costs: the Stash shard runs it
// on the block while it holds it.
func (q requests) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	rep, err := q.send(ctx, Request{Op: m.Op, ID: q.id(key), Value: bytes.Clone(m.Arg), If: m.If, ReturnOld: m.ReturnOld}.withName(key))
	return rep.Result, err
}

func (q requests) Put(ctx context.Context, key string, val []byte) error {
	_, err := q.send(ctx, Request{Op: OpPut, ID: q.id(key), Value: append([]byte{}, val...)}.withName(key))
	return err
}

func (q requests) Delete(ctx context.Context, key string) error {
	_, err := q.send(ctx, Request{Op: OpDelete, ID: q.id(key)})
	return err
}

// replyOf is a Router's reply to a request as a call's outcome: its
// Status as the error.
func replyOf(rep Reply, err error) (Reply, error) {
	if err != nil {
		return Reply{}, err
	}
	return rep, rep.Err()
}
