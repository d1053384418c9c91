// Package redis is the backend.Backend on a Redis server, the untrusted
// remote storage of the papers' evaluations, through go-redis v9.
//
// It owns two go-redis clients (connection pools) for one Redis logical
// database: one for every call, and one whose connections stay armed for
// fenced writes (watch.go). Each call is one command or one pipeline, so
// one round trip: Read is one MGET, Write one MSET and Delete one DEL
// with every address; Redis runs each command atomically, so a batch is
// all-or-nothing and a Read never sees half of a Write. Empty batches
// send nothing. WriteVersioned and a WriteFenced that raises its token
// (or has no items) are each one Lua script, run with EVALSHA (EVAL the
// first time a server sees it), which Redis also runs atomically; any
// other WriteFenced is one pipeline whose MULTI/EXEC holds the batch's
// MSET, on a connection that WATCHes the fence (watch.go); PipelineFenced
// pipelines either with its reads. Scan (used only when a store opens)
// walks SCAN with MATCH on the prefix, its glob characters escaped, so it
// matches the prefix literally.
//
// It must never log or inspect values or addresses, never split a batch
// into several commands, and never share a slice with go-redis: addresses
// and values are sent as binary-safe bulk strings and every value read is
// copied into a fresh slice owned by the caller.
//
// Durability is the server's: a Write is acknowledged once Redis applied it
// in memory; surviving a Redis restart needs Redis persistence (AOF with
// appendfsync) configured by the operator.
//
// Over TLS (a rediss:// URL) the server's certificate is verified against
// the system's CAs or those of the URL's tls_ca file, for the URL's host
// name; tls_cert and tls_key give a client certificate to a server that
// requires one (Redis's tls-auth-clients).
//
// Why go-redis: it is the Redis project's own Go client, maintained, with a
// connection pool that serves many concurrent callers (this backend is
// called by up to hundreds of goroutines), context support and RESP2/RESP3.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/oblivkv/oblivkv/backend"
)

// DefaultPoolSize is the connection pool size used when neither Options nor
// the URL sets one: enough for 256 concurrent callers, with room to spare.
const DefaultPoolSize = 512

// probeTimeout bounds the connection check in Open.
const probeTimeout = 5 * time.Second

// scanCount is the COUNT hint of every SCAN step.
const scanCount = 1000

// Options tune a Redis backend. The zero value uses the defaults.
type Options struct {
	// PoolSize is the most connections kept open to Redis, and so the most
	// calls in flight at once. 0 means the URL's pool_size parameter if
	// present, else DefaultPoolSize.
	PoolSize int
}

// Backend is a backend.Backend on one Redis logical database.
type Backend struct {
	client *goredis.Client
	watch  *watchPool // fenced batches' armed connections (watch.go)
	closed atomic.Bool
}

// Open connects to url, "redis://[[USER]:PASSWORD@]HOST:PORT[/DB]" or, over
// TLS, "rediss://..." (any form go-redis's ParseURL accepts, and for
// rediss:// the query parameters tls_ca=FILE, tls_cert=FILE and
// tls_key=FILE: see parseURL), with default Options, and checks the server
// answers PING.
func Open(ctx context.Context, url string) (*Backend, error) {
	return OpenWith(ctx, url, Options{})
}

// OpenWith is Open with explicit Options.
func OpenWith(ctx context.Context, url string, o Options) (*Backend, error) {
	opt, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if o.PoolSize > 0 {
		opt.PoolSize = o.PoolSize
	} else if opt.PoolSize == 0 {
		opt.PoolSize = DefaultPoolSize
	}
	opt.ContextTimeoutEnabled = true // a caller's deadline bounds its call
	opt.DisableIdentity = true       // no CLIENT SETINFO: tell the operator nothing extra
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if err := probe(ctx, opt.Network, opt.Addr); err != nil {
		return nil, fmt.Errorf("redis: cannot reach %s: %w", opt.Addr, err)
	}
	client := goredis.NewClient(opt)
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redis: PING %s (db %d): %w", opt.Addr, opt.DB, err)
	}
	return &Backend{client: client, watch: newWatchPool(*opt)}, nil
}

// probe fails fast when nothing listens at addr, before go-redis would
// retry the dial several times and log each failure.
func probe(ctx context.Context, network, addr string) error {
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// check returns ErrClosed after Close.
func (b *Backend) check() error {
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// wrap gives a go-redis error context, and maps the error of a call that
// raced with Close to backend.ErrClosed.
func wrap(op string, err error) error {
	if errors.Is(err, goredis.ErrClosed) {
		return backend.ErrClosed
	}
	return fmt.Errorf("redis: %s: %w", op, err)
}

// Read implements backend.Backend with one MGET.
func (b *Backend) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return make([][]byte, 0), nil
	}
	vals, err := b.client.MGet(ctx, addrs...).Result()
	if err != nil {
		return nil, wrap("MGET", err)
	}
	return values(vals, addrs)
}

// values converts an MGET's answer for addrs.
func values(vals []any, addrs []string) ([][]byte, error) {
	out := make([][]byte, len(addrs))
	if len(vals) != len(addrs) {
		return nil, fmt.Errorf("redis: MGET of %d keys returned %d values", len(addrs), len(vals))
	}
	for i, v := range vals {
		var err error
		if out[i], err = value(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// value converts one MGET entry: nil for a missing key, otherwise a fresh
// slice, non-nil even when empty.
func value(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return append(make([]byte, 0, len(v)), v...), nil
	default:
		return nil, fmt.Errorf("redis: MGET returned a %T, want a string", v)
	}
}

// Write implements backend.Backend with one MSET.
func (b *Backend) Write(ctx context.Context, items []backend.Item) error {
	if err := b.check(); err != nil || len(items) == 0 {
		return err
	}
	if err := b.client.MSet(ctx, msetArgs(items)...).Err(); err != nil {
		return wrap("MSET", err)
	}
	return nil
}

// msetArgs returns MSET's arguments for items.
func msetArgs(items []backend.Item) []any {
	args := make([]any, 0, 2*len(items))
	for _, it := range items {
		v := it.Value
		if v == nil {
			v = []byte{} // an empty value, not a missing one
		}
		args = append(args, it.Addr, v)
	}
	return args
}

// Pipeline implements backend.Pipeliner: MSET (when there are items) and
// one MGET per address list pipelined on one connection, which Redis runs
// in that order.
func (b *Backend) Pipeline(ctx context.Context, items []backend.Item, reads [][]string) ([][][]byte, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	mgets := make([]*goredis.SliceCmd, len(reads))
	_, err := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if len(items) > 0 {
			p.MSet(ctx, msetArgs(items)...)
		}
		for i, addrs := range reads {
			if len(addrs) > 0 {
				mgets[i] = p.MGet(ctx, addrs...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrap("MSET and MGETs", err)
	}
	return mgetValues(mgets, reads)
}

// mgetValues converts the answers of a pipeline's MGETs, one per address
// list of reads (nil for an empty list).
func mgetValues(mgets []*goredis.SliceCmd, reads [][]string) ([][][]byte, error) {
	out := make([][][]byte, len(reads))
	for i, addrs := range reads {
		if mgets[i] == nil {
			continue
		}
		var err error
		if out[i], err = values(mgets[i].Val(), addrs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// versionedScript stores ARGV[2i] at KEYS[i] when the version ARGV[2i-1]
// is newer than the 8-byte big-endian version in front of the stored
// value, and returns how many items were stale. Redis runs a script
// atomically, so the compare and the set are one step.
var versionedScript = goredis.NewScript(`
local stale = 0
for i, key in ipairs(KEYS) do
  local new = tonumber(ARGV[2*i-1])
  local cur = redis.call('GETRANGE', key, 0, 7)
  local old = 0
  if #cur == 8 then
    for j = 1, 8 do old = old * 256 + string.byte(cur, j) end
  end
  if new > old then
    redis.call('SET', key, ARGV[2*i])
  else
    stale = stale + 1
  end
end
return stale
`)

// WriteVersioned implements backend.Backend with one Lua script call
// (EVALSHA; EVAL once, the first time a server sees it).
func (b *Backend) WriteVersioned(ctx context.Context, items []backend.VersionedItem) (int, error) {
	if err := backend.CheckVersions(items); err != nil {
		return 0, err
	}
	if err := b.check(); err != nil || len(items) == 0 {
		return 0, err
	}
	keys := make([]string, len(items))
	args := make([]any, 0, 2*len(items))
	for i, it := range items {
		keys[i] = it.Addr
		args = append(args, it.Version, backend.EncodeVersioned(it.Version, it.Value))
	}
	stale, err := versionedScript.Run(ctx, b.client, keys, args...).Int()
	if err != nil {
		return 0, wrap("versioned write", err)
	}
	return stale, nil
}

// fenceScript stores a fenced batch: KEYS[1] is the fence's key and
// ARGV[1] its token (8 bytes, big-endian), KEYS[i] and ARGV[i] for i > 1
// the items. If the token stored at KEYS[1] is higher it stores nothing
// and returns the stored token; otherwise it sets every item, in order,
// and the token, and returns an empty string. Tokens are compared byte by
// byte, exactly (Lua's numbers are doubles; its string comparison follows
// the server's locale). Redis runs a script atomically, so the compare
// and the sets are one step.
var fenceScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  if #cur ~= 8 then
    return redis.error_reply('fence token of ' .. #cur .. ' bytes, want 8')
  end
  for j = 1, 8 do
    local new, old = string.byte(ARGV[1], j), string.byte(cur, j)
    if new < old then return cur end
    if new > old then break end
  end
end
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i])
end
redis.call('SET', KEYS[1], ARGV[1])
return ''
`)

// fenceArgs returns fenceScript's keys and arguments for a fenced batch.
func fenceArgs(f backend.Fence, items []backend.Item) ([]string, []any) {
	keys := make([]string, 0, 1+len(items))
	args := make([]any, 0, 1+len(items))
	keys = append(keys, f.Key)
	args = append(args, backend.EncodeToken(f.Token))
	for _, it := range items {
		v := it.Value
		if v == nil {
			v = []byte{} // an empty value, not a missing one
		}
		keys = append(keys, it.Addr)
		args = append(args, v)
	}
	return keys, args
}

// fenceResult turns fenceScript's answer into nil or the refusal.
func fenceResult(f backend.Fence, cmd *goredis.Cmd) error {
	stored, err := cmd.Text()
	if err != nil {
		return wrap("fenced write", err)
	}
	if stored == "" {
		return nil
	}
	token, err := backend.StoredToken([]byte(stored))
	if err != nil {
		return err
	}
	return backend.Refused(f, token)
}

// WriteFenced implements backend.Backend: one pipeline on a watched
// connection (watch.go), or one Lua script call (EVALSHA; EVAL once, the
// first time a server sees it) for a batch that raises the token or has
// no items.
func (b *Backend) WriteFenced(ctx context.Context, f backend.Fence, items []backend.Item) error {
	if f.Unfenced() {
		return b.Write(ctx, items)
	}
	if err := backend.CheckFence(f, items); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	if _, done, err := b.pipelineWatched(ctx, f, items, nil); done {
		return err
	}
	keys, args := fenceArgs(f, items)
	return fenceResult(f, fenceScript.Run(ctx, b.client, keys, args...))
}

// PipelineFenced implements backend.Pipeliner: the fenced write and one
// MGET per address list pipelined on one connection, which Redis runs in
// that order. The write is a MULTI/EXEC on a watched connection
// (watch.go), or the fenced write's script (EVALSHA) for a batch that
// raises the token or has no items. A server that does not hold the
// script (the first call, or after a restart) answers NOSCRIPT and runs
// nothing of the write; the pipeline is then sent again with EVAL, which
// loads it.
func (b *Backend) PipelineFenced(ctx context.Context, f backend.Fence, items []backend.Item, reads [][]string) ([][][]byte, error) {
	if f.Unfenced() {
		return b.Pipeline(ctx, items, reads)
	}
	if err := backend.CheckFence(f, items); err != nil {
		return nil, err
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	if out, done, err := b.pipelineWatched(ctx, f, items, reads); done {
		return out, err
	}
	out, err := b.pipelineFenced(ctx, fenceScript.EvalSha, f, items, reads)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		out, err = b.pipelineFenced(ctx, fenceScript.Eval, f, items, reads)
	}
	return out, err
}

// evalFunc is how a pipeline sends fenceScript: EvalSha or Eval.
type evalFunc func(ctx context.Context, c goredis.Scripter, keys []string, args ...any) *goredis.Cmd

// pipelineFenced sends one pipeline of the script, sent with eval, and
// the reads.
func (b *Backend) pipelineFenced(ctx context.Context, eval evalFunc, f backend.Fence, items []backend.Item, reads [][]string) ([][][]byte, error) {
	keys, args := fenceArgs(f, items)
	var script *goredis.Cmd
	mgets := make([]*goredis.SliceCmd, len(reads))
	_, err := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		script = eval(ctx, p, keys, args...)
		for i, addrs := range reads {
			if len(addrs) > 0 {
				mgets[i] = p.MGet(ctx, addrs...)
			}
		}
		return nil
	})
	if goredis.HasErrorPrefix(script.Err(), "NOSCRIPT") {
		return nil, script.Err()
	}
	if err := fenceResult(f, script); err != nil {
		return nil, err
	}
	if err != nil {
		return nil, wrap("fenced write and MGETs", err)
	}
	return mgetValues(mgets, reads)
}

// Delete implements backend.Backend with one DEL.
func (b *Backend) Delete(ctx context.Context, addrs []string) error {
	if err := b.check(); err != nil || len(addrs) == 0 {
		return err
	}
	if err := b.client.Del(ctx, addrs...).Err(); err != nil {
		return wrap("DEL", err)
	}
	return nil
}

// Scan implements backend.Backend with SCAN ... MATCH <prefix>* COUNT 1000.
// SCAN may report a key more than once; Scan reports each address once.
func (b *Backend) Scan(ctx context.Context, prefix string, fn func(addr string) error) error {
	if err := b.check(); err != nil {
		return err
	}
	seen := map[string]struct{}{}
	pattern := globEscape(prefix) + "*"
	var cursor uint64
	for {
		keys, next, err := b.client.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return wrap("SCAN", err)
		}
		for _, k := range keys {
			if _, dup := seen[k]; dup || !strings.HasPrefix(k, prefix) {
				continue
			}
			seen[k] = struct{}{}
			if err := fn(k); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// globEscape escapes the characters Redis's glob matching treats specially
// (* ? [ ] \ and, inside brackets, ^ and -), so the pattern matches s
// literally.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Close implements backend.Backend: it closes the connection pool. Data
// stays on the server. Closing twice returns nil.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	if err := errors.Join(b.watch.close(), b.client.Close()); err != nil {
		return fmt.Errorf("redis: close: %w", err)
	}
	return nil
}

var _ backend.Backend = (*Backend)(nil)
