package treebeard

import (
	"bytes"
	"context"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// RouterStore is a cluster's router process as its RESP clients see it
// (Treebeard Sec. 5.1): a kv.Store whose requests its Router batches into
// epochs and forwards to the Stash shards' groups. It holds nothing
// durable: a request whose reply it loses is retried by its client,
// and a Stash shard runs a request it got twice once (requestTable).
type RouterStore struct {
	sh     Shape
	keys   *seal.Keys
	router *Router
	closed atomic.Bool
}

// NewRouterStore returns router id of a cluster of shape sh, reaching
// each Stash shard's group through shards. Its epochs and request ids
// are numbered from the wall clock at start (routerStart), so that a
// router started again never repeats its earlier run's.
func NewRouterStore(sh Shape, keys *seal.Keys, id int, shards []StashShard) *RouterStore {
	net := newNetState()
	start := routerStart(id, time.Now())
	net.incarnation.Store(start)
	r := newRouter(id, sh.opts.Epoch, clockwork.NewRealClock(), shards, net, nil)
	r.core.next = start
	return &RouterStore{sh: sh, keys: keys, router: r}
}

// routerStart is the first epoch number of router id started at now:
// the id in the top 16 bits, then the milliseconds since 2020 times 256
// (a router starts past its earlier run's epochs unless that run cut
// more than 256 epochs a millisecond, on average).
func routerStart(id int, now time.Time) uint64 {
	ms := uint64(now.Sub(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)).Milliseconds())
	return uint64(id)<<48 | (ms<<8)&(1<<48-1)
}

func (s *RouterStore) do(ctx context.Context, req Request) (Reply, error) {
	if s.closed.Load() {
		return Reply{}, kv.ErrClosed
	}
	rep, err := s.router.Do(ctx, req)
	if err != nil {
		return Reply{}, err
	}
	return rep, rep.Err()
}

func (s *RouterStore) id(key string) tree.BlockID { return tree.IDOf(s.keys, key) }

func (s *RouterStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	rep, err := s.do(ctx, Request{Op: OpGet, ID: s.id(key)})
	return rep.Old, rep.Found, err
}

func (s *RouterStore) Put(ctx context.Context, key string, val []byte) error {
	_, err := s.do(ctx, Request{Op: OpPut, ID: s.id(key), Value: bytes.Clone(val)})
	return err
}

func (s *RouterStore) Delete(ctx context.Context, key string) error {
	_, err := s.do(ctx, Request{Op: OpDelete, ID: s.id(key)})
	return err
}

// Update applies m in one access, as the store in one process does.
func (s *RouterStore) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	rep, err := s.do(ctx, Request{Op: m.Op, ID: s.id(key), Value: bytes.Clone(m.Arg), If: m.If, ReturnOld: m.ReturnOld})
	return rep.Result, err
}

// Stats are the store's shape: a router counts nothing of the shards'.
func (s *RouterStore) Stats() kv.Stats {
	return kv.Stats{Protocol: protocolName, Capacity: int(s.sh.capacity), ValueSize: s.sh.valueSize}
}

// Close answers the requests in flight and refuses new ones.
func (s *RouterStore) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.router.Close()
	}
	return nil
}
