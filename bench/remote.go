package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/oblivkv/oblivkv/observe"
)

// loadBatch is the number of keys per MSET of a RESP load, and per DEL of
// its clean-up. An oblivious server runs an MSET's puts one after the
// other (each waits for its access), so a small batch keeps one MSET's
// reply within seconds and the load's parallelism in its connections.
const loadBatch = 16

// loadConnections bounds the MSETs of a RESP load in flight, when the
// run's concurrency is higher.
const loadConnections = 256

// respTimeout bounds how long a RESP command may wait for its reply. A
// loaded oblivious server can take seconds; go-redis's default (3 s) would
// count those as failures.
const respTimeout = time.Minute

// DialRESP connects to the RESP server at addr (an oblivkv server, or any
// Redis) with a pool of poolSize connections: give it at least the run's
// concurrency. The target loads with MSET batches, and its Close deletes
// every key the load wrote, leaving the server as the run found it (keys
// the run's updates overwrote are not restored).
//
// Backend counters come from the server's INFO fields backend_calls,
// backend_bytes_read and backend_bytes_written when it reports them; they
// count every client of the server, so run nothing else against it. The
// protocol name comes from INFO's protocol field, if any.
func DialRESP(ctx context.Context, addr string, poolSize int) (Target, error) {
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		PoolSize:        max(poolSize, 1),
		Protocol:        2, // plain RESP2: no HELLO handshake needed
		ReadTimeout:     respTimeout,
		WriteTimeout:    respTimeout,
		DisableIdentity: true, // no CLIENT SETINFO on connect
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("bench: connecting to %s: %w", addr, err)
	}
	return &respTarget{c: c}, nil
}

type respTarget struct {
	c *redis.Client

	mu     sync.Mutex
	loaded []string // keys to delete on Close
}

func (t *respTarget) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := t.c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (t *respTarget) Put(ctx context.Context, key string, val []byte) error {
	return t.c.Set(ctx, key, val, 0).Err()
}

// Load sends MSET batches of loadBatch keys from up to loadConnections of
// concurrency connections.
func (t *respTarget) Load(ctx context.Context, items iter.Seq2[string, []byte], concurrency int) error {
	return parallel(ctx, t.batches(items), min(concurrency, loadConnections), func(ctx context.Context, pairs []any) error {
		if err := t.c.MSet(ctx, pairs...).Err(); err != nil {
			return fmt.Errorf("MSET: %w", err)
		}
		return nil
	})
}

// batches groups items into MSET argument lists, remembering the keys.
func (t *respTarget) batches(items iter.Seq2[string, []byte]) iter.Seq[[]any] {
	return func(yield func([]any) bool) {
		var pairs []any
		for k, v := range items {
			t.mu.Lock()
			t.loaded = append(t.loaded, k)
			t.mu.Unlock()
			if pairs = append(pairs, k, v); len(pairs) == 2*loadBatch {
				if !yield(pairs) {
					return
				}
				pairs = nil
			}
		}
		if len(pairs) > 0 {
			yield(pairs)
		}
	}
}

func (t *respTarget) Snapshot(ctx context.Context) (Snapshot, error) {
	info, err := t.c.Info(ctx).Result()
	if err != nil {
		return Snapshot{}, fmt.Errorf("INFO: %w", err)
	}
	return ParseInfo(info), nil
}

// Close deletes the loaded keys, DELs of loadBatch keys from up to
// loadConnections connections, and closes the connections.
func (t *respTarget) Close(ctx context.Context) error {
	t.mu.Lock()
	keys := t.loaded
	t.loaded = nil
	t.mu.Unlock()
	err := parallel(ctx, slices.Chunk(keys, loadBatch), loadConnections, func(ctx context.Context, batch []string) error {
		return t.c.Del(ctx, batch...).Err()
	})
	if err != nil {
		err = fmt.Errorf("deleting the benchmark's keys: %w", err)
	}
	return errors.Join(err, t.c.Close())
}

// ParseInfo reads the backend counters and protocol name from the text of
// an INFO reply. Backend is nil unless backend_calls is present.
func ParseInfo(info string) Snapshot {
	var s Snapshot
	var c observe.Counters
	seen := false
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		n, nerr := strconv.ParseUint(val, 10, 64)
		switch {
		case name == "protocol":
			s.Protocol = val
		case nerr != nil:
		case name == "backend_calls":
			c.Calls, seen = n, true
		case name == "backend_bytes_read":
			c.BytesRead = n
		case name == "backend_bytes_written":
			c.BytesWritten = n
		}
	}
	if seen {
		s.Backend = &c
	}
	return s
}
