package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/backend"
)

// A fenced batch has two ways to storage.
//
// The script (fenceScript, one EVALSHA) compares the token and sets every
// item. It is the only way that raises a fence's token, and it serves a
// batch with no items. Lua copies every value into the interpreter and out
// again, which costs Redis about twice a plain MSET's time on a treebeard
// eviction's 40 slots of 1.1 KiB (BenchmarkFenced).
//
// A watched connection sends the batch as the MSET it is: one pipeline of
// MULTI, MSET, EXEC, then WATCH and GET of the fence key (the reads of a
// PipelineFenced sit between EXEC and WATCH). Redis runs EXEC only if no
// client wrote the fence key since the connection's last WATCH, and the
// GET that follows each WATCH says what the key held when the watch was
// armed (a write between the two disarms it). So an EXEC that runs wrote
// its batch while the key held exactly the token the connection last
// read, and a connection is used only for a batch of that token: the
// compare and the MSET are one atomic step, as in the script. An EXEC
// that does not run (the key was written: a newer claim, or the script
// restating the same token) wrote nothing; the connection is re-armed by
// the same pipeline and the batch tried again, refused, or sent by the
// script, as the token it read says.
//
// Watched connections come from a client of their own that never resends
// a pipeline (MaxRetries -1), each pinned to one TCP connection: a
// connection that fails is closed and never reconnects under a watch it
// does not hold.

// maxAborts bounds how many times a batch goes again on a watched
// connection whose EXEC did not run before it goes by the script.
const maxAborts = 3

// maxIdleWatched is how many armed connections a fence key keeps idle:
// as many as its writes in flight at once, or a write arms a new one (a
// round trip and a connection more). ObliviStore at 256 clients armed
// 40% of its writes anew with 8.
const maxIdleWatched = 128

// watchedConn is a connection whose WATCH of one fence key is armed.
type watchedConn struct {
	conn  *goredis.Conn
	token uint64 // what the fence key held when the WATCH was armed
}

// watchPool keeps armed connections per fence key.
type watchPool struct {
	client *goredis.Client
	off    atomic.Bool // the server refused MULTI: every batch goes by the script
	mu     sync.Mutex
	idle   map[string][]*watchedConn
}

// newWatchPool returns a pool whose connections are opt's, never retried.
func newWatchPool(opt goredis.Options) *watchPool {
	opt.MaxRetries = -1
	return &watchPool{client: goredis.NewClient(&opt), idle: map[string][]*watchedConn{}}
}

// take returns an idle armed connection for key, or arms a new one:
// UNWATCH (a pooled connection may hold another key's watch), an empty
// MULTI/EXEC (a server that refuses transactions, say by ACL, turns the
// pool off rather than have a batch's MSET run outside one), WATCH key,
// GET key. It returns nil, nil when the pool is off.
func (p *watchPool) take(ctx context.Context, key string) (*watchedConn, error) {
	if p.off.Load() {
		return nil, nil
	}
	p.mu.Lock()
	if list := p.idle[key]; len(list) > 0 {
		w := list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
		p.mu.Unlock()
		return w, nil
	}
	p.mu.Unlock()
	w := &watchedConn{conn: p.client.Conn()}
	refused, err := w.arm(ctx, key)
	if refused {
		p.off.Store(true)
	}
	if refused || err != nil {
		w.conn.Close()
		return nil, err
	}
	return w, nil
}

// arm sends UNWATCH, an empty MULTI/EXEC, WATCH key and GET key, and
// reads the token. refused is true when the server refused MULTI.
func (w *watchedConn) arm(ctx context.Context, key string) (refused bool, err error) {
	var multi *goredis.StatusCmd
	var get *goredis.StringCmd
	w.conn.Pipelined(ctx, func(p goredis.Pipeliner) error { // each command's error is read below
		p.Do(ctx, "unwatch")
		multi = goredis.NewStatusCmd(ctx, "multi")
		p.Process(ctx, multi)
		p.Do(ctx, "exec")
		p.Do(ctx, "watch", key)
		get = p.Get(ctx, key)
		return nil
	})
	if w.token, err = storedToken(get); err != nil {
		return false, err
	}
	var serverErr goredis.Error
	return errors.As(multi.Err(), &serverErr), nil
}

// put keeps w armed for key, or closes it when enough are idle.
func (p *watchPool) put(key string, w *watchedConn) {
	p.mu.Lock()
	if p.idle != nil && len(p.idle[key]) < maxIdleWatched { // nil: closed
		p.idle[key] = append(p.idle[key], w)
		w = nil
	}
	p.mu.Unlock()
	if w != nil {
		w.conn.Close()
	}
}

// close closes every idle connection and the client.
func (p *watchPool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, list := range p.idle {
		for _, w := range list {
			w.conn.Close()
		}
	}
	p.idle = nil
	return p.client.Close()
}

// storedToken reads a GET of a fence key: 0 when the key is missing.
func storedToken(get *goredis.StringCmd) (uint64, error) {
	v, err := get.Bytes()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return backend.StoredToken(v)
}

// pipelineWatched sends f's batch and the reads over watched connections
// of f.Key. It returns done = false when the batch must go by the script
// instead: the key holds a lower token (or the batch is empty, or EXEC
// kept not running).
func (b *Backend) pipelineWatched(ctx context.Context, f backend.Fence, items []backend.Item, reads [][]string) (out [][][]byte, done bool, err error) {
	if len(items) == 0 {
		return nil, false, nil
	}
	for range maxAborts {
		w, err := b.watch.take(ctx, f.Key)
		if err != nil {
			return nil, true, wrap("WATCH of the fence", err)
		}
		if w == nil {
			return nil, false, nil
		}
		if w.token > f.Token {
			b.watch.put(f.Key, w)
			return nil, true, backend.Refused(f, w.token)
		}
		if w.token < f.Token { // the script raises it, and disarms w
			w.conn.Close()
			return nil, false, nil
		}
		wrote, out, err := b.sendWatched(ctx, w, f.Key, items, reads)
		if err != nil || wrote {
			return out, true, err
		}
	}
	return nil, false, nil
}

// sendWatched runs one pipeline of MULTI, MSET, EXEC, the reads, WATCH
// and GET on w, which it then puts back re-armed, or closes when the
// connection failed. wrote is false when EXEC did not run: nothing was
// written.
func (b *Backend) sendWatched(ctx context.Context, w *watchedConn, key string, items []backend.Item, reads [][]string) (wrote bool, out [][][]byte, err error) {
	var mset *goredis.StatusCmd
	var exec *goredis.SliceCmd
	var get *goredis.StringCmd
	mgets := make([]*goredis.SliceCmd, len(reads))
	w.conn.Pipelined(ctx, func(p goredis.Pipeliner) error { // each command's error is read below
		p.Do(ctx, "multi")
		mset = p.MSet(ctx, msetArgs(items)...)
		exec = goredis.NewSliceCmd(ctx, "exec")
		p.Process(ctx, exec)
		for i, addrs := range reads {
			if len(addrs) > 0 {
				mgets[i] = p.MGet(ctx, addrs...)
			}
		}
		p.Do(ctx, "watch", key)
		get = p.Get(ctx, key)
		return nil
	})
	// The GET is the pipeline's last reply: a connection that failed
	// fails it, and leaves the watch in an unknown state.
	if w.token, err = storedToken(get); err != nil {
		w.conn.Close()
		return false, nil, wrap("fenced MULTI/EXEC", err)
	}
	b.watch.put(key, w)
	if queued := mset.Val(); queued != "QUEUED" {
		return false, nil, fmt.Errorf("redis: fenced MSET answered %q inside MULTI, want QUEUED: %w", queued, mset.Err())
	}
	return watchedResult(exec, mgets, reads)
}

// watchedResult reads a watched pipeline's EXEC and reads.
func watchedResult(exec *goredis.SliceCmd, mgets []*goredis.SliceCmd, reads [][]string) (wrote bool, out [][][]byte, err error) {
	for _, m := range mgets {
		if m != nil && m.Err() != nil {
			return false, nil, wrap("MGET", m.Err())
		}
	}
	replies, err := exec.Result()
	if errors.Is(err, goredis.Nil) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, wrap("fenced EXEC", err)
	}
	if len(replies) != 1 {
		return false, nil, fmt.Errorf("redis: fenced EXEC answered %d replies, want 1", len(replies))
	}
	if err, ok := replies[0].(error); ok {
		return false, nil, wrap("fenced MSET", err)
	}
	out, err = mgetValues(mgets, reads)
	return true, out, err
}
