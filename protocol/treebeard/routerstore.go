package treebeard

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// RouterStore is a cluster's router process as its RESP clients see it
// (Treebeard Sec. 5.1): a kv.Store whose requests its Router batches into
// epochs and forwards to the Stash shards' groups. It holds nothing
// durable: a request whose reply it loses is retried by its client,
// and a Stash shard runs a request it got twice once (requestTable).
type RouterStore struct {
	requests // the kv.Store calls, sent through router
	sh       Shape
	router   *Router
}

// NewRouterStore returns router id of a cluster of shape sh, reaching
// each Stash shard's group through shards. Its epochs and request ids
// are numbered from the wall clock at start (routerStart), so that a
// router started again never repeats its earlier run's.
func NewRouterStore(sh Shape, keys *seal.Keys, id int, shards []StashShard) *RouterStore {
	return newRouterStore(sh, keys, id, shards, clockwork.NewRealClock())
}

// newRouterStore is NewRouterStore whose epochs and Close run on clock.
func newRouterStore(sh Shape, keys *seal.Keys, id int, shards []StashShard, clock clockwork.Clock) *RouterStore {
	net := newNetState()
	start := routerStart(id, clock.Now())
	net.incarnation.Store(start)
	r := newRouter(id, sh.opts.Epoch, clock, shards, net, nil)
	r.core.next = start
	return &RouterStore{requests: requests{keys: keys, send: func(ctx context.Context, req Request) (Reply, error) {
		return replyOf(r.Do(ctx, req))
	}}, sh: sh, router: r}
}

// routerStart is the first epoch number of router id started at now:
// the id in the top 16 bits, then the milliseconds since 2020 times 256
// (a router starts past its earlier run's epochs unless that run cut
// more than 256 epochs a millisecond, on average).
func routerStart(id int, now time.Time) uint64 {
	ms := uint64(now.Sub(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)).Milliseconds())
	return uint64(id)<<48 | (ms<<8)&(1<<48-1)
}

// Stats are the store's shape: a router counts nothing of the shards'.
func (s *RouterStore) Stats() kv.Stats {
	return kv.Stats{Protocol: protocolName, Capacity: int(s.sh.capacity), ValueSize: s.sh.valueSize}
}

// closeGrace is how long Close waits for the epochs in flight to be
// answered before it stops sending their messages again (a Stash shard's
// group with no leader, or gone: the cluster is stopping too).
const closeGrace = 5 * time.Second

// Close refuses new requests (kv.ErrClosed, the Router's) and answers
// those in flight: with their replies if they come within closeGrace,
// else with an error that leaves their outcome unknown (the client
// retries them, and a Stash shard runs a request it got twice once).
func (s *RouterStore) Close() error {
	closed := make(chan struct{})
	go func() {
		s.router.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-s.router.clock.After(closeGrace):
		s.router.net.stop()
		<-closed
	}
	return nil
}
