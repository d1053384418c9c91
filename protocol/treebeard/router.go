package treebeard

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/oblivkv/oblivkv/kv"
)

// Router collects client requests for an epoch and forwards them to the
// Stash shard in charge of each block, chosen by a hash of the key (the
// block ID is a PRF of the key), then hands each reply to its caller
// (Sec. 5.1.1). It drives a routerCore: the Router owns the epoch timer,
// the callers waiting and the calls to the shards, and every input reaches
// the core as a routerEntry (a request, or the epoch's cut when its timer
// fires), one at a time. It is stateless: a
// request it loses is retried by its client, and Stash shards recognise
// nothing but the requests they get.
//
// Epochs are consecutive, non-overlapping collection intervals; an epoch
// starts with its first request, so an idle Router costs nothing, and
// ends one epoch duration later on the store's clock (a test's, or the
// audit's, fake clock ends it when it is advanced). Epochs already
// forwarded may still be in flight while the next one collects.
type Router struct {
	id     int // the Router's number: its messages' sender
	epoch  time.Duration
	clock  clockwork.Clock
	shards []StashShard
	net    *netState
	trace  func(traceEvent)

	mu      sync.Mutex
	core    routerCore
	applied func(routerEntry, routerOutput) // tests: sees every entry and its outputs, in order
	calls   []*call                         // the callers of the collecting epoch, by the core's index
	timer   clockwork.Timer
	closed  bool
	flights sync.WaitGroup // epochs forwarded and not yet answered

	released releases // by Stash shard
}

type call struct {
	reply Reply
	done  chan struct{}
}

// newRouter returns Router id forwarding to shards, with epochs of epoch
// on clock (zero or negative: forward every request at once). Its epoch
// numbers start at id<<48: distinct Routers use distinct ranges, so
// epochs are unique.
func newRouter(id int, epoch time.Duration, clock clockwork.Clock, shards []StashShard, net *netState, trace func(traceEvent)) *Router {
	return &Router{id: id, epoch: epoch, clock: clock, shards: shards, net: net, trace: trace,
		core: routerCore{id: id, shards: len(shards), next: uint64(id) << 48}}
}

// Do submits req in the current epoch and waits for its reply. When ctx
// ends first, Do returns ctx.Err(); the request still runs to completion,
// since what storage sees must not depend on callers giving up.
func (r *Router) Do(ctx context.Context, req Request) (Reply, error) {
	c := &call{done: make(chan struct{})}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return Reply{}, kv.ErrClosed
	}
	r.calls = append(r.calls, c)
	if r.applyLocked(routerEntry{Req: req, Incarnation: r.net.incarnation.Load()}).Index == 0 { // the epoch's first request
		if r.epoch <= 0 {
			r.forwardLocked()
		} else {
			r.timer = r.clock.AfterFunc(r.epoch, r.endEpoch)
		}
	}
	r.mu.Unlock()
	select {
	case <-c.done:
		return c.reply, nil
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	}
}

// endEpoch ends the collecting epoch: its timer expired.
func (r *Router) endEpoch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forwardLocked()
}

// collecting returns the number of requests the collecting epoch holds.
func (r *Router) collecting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.size()
}

// forwardLocked closes the collecting epoch and forwards its requests to
// every Stash shard, each the batch of its own keys in arrival order.
func (r *Router) forwardLocked() {
	out := r.applyLocked(routerEntry{Cut: true})
	if !out.Cut {
		return
	}
	f := out.Forwarded
	calls := r.calls
	r.calls, r.timer = nil, nil
	if r.trace != nil {
		r.trace(traceEvent{Kind: traceEpoch, Epoch: f.Epoch, Requests: len(calls)})
	}
	for s, batch := range f.Batches {
		waiting := make([]*call, len(batch))
		for i, at := range f.Index[s] {
			waiting[i] = calls[at]
		}
		r.flights.Add(1)
		go r.forward(s, f.Epoch, batch, waiting)
	}
}

// forward sends shard s its batch of epoch, again while it is lost in
// transit, and hands each reply to its caller.
func (r *Router) forward(s int, epoch uint64, batch []Request, waiting []*call) {
	defer r.flights.Done()
	id := r.net.msgID(Endpoint{LayerRouter, r.id}, epoch, uint64(s))
	rep := exchange(r.net, &r.released, s, id, func(release []MsgID) AccessReply {
		return r.shards[s].Access(AccessMsg{ID: id, Batch: batch, Release: release})
	})
	for i, c := range waiting {
		if rep.Code == CodeOK && len(rep.Replies) == len(waiting) {
			c.reply = rep.Replies[i]
		} else {
			c.reply = Reply{Status: cmp.Or(rep.Status, Status{Code: CodeUnavailable,
				Detail: fmt.Sprintf("treebeard: Stash shard %d answered %d of %d requests", s, len(rep.Replies), len(waiting))})}
		}
		close(c.done)
	}
}

// applyLocked applies entry e to the core; r.mu is held.
func (r *Router) applyLocked(e routerEntry) routerOutput {
	out := r.core.step(e)
	if r.applied != nil {
		r.applied(e, out)
	}
	return out
}

// Close forwards the collecting epoch, waits until every forwarded epoch
// is answered, and refuses new requests.
func (r *Router) Close() {
	r.mu.Lock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.forwardLocked()
	r.mu.Unlock()
	r.flights.Wait()
}
