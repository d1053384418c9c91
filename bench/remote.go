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
	"sync/atomic"
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

// DialRESP connects to the RESP servers at addrs (oblivkv servers, the
// routers of one oblivkv cluster, or any Redis) with poolSize connections
// in all, shared evenly: give it at least the run's concurrency. Calls go
// to the servers in turn, so the run's clients spread over them. The
// target loads with MSET batches, and its Close deletes every key the
// load wrote, leaving the store as the run found it (keys the run's
// updates overwrote are not restored).
//
// Backend counters come from the first server's INFO fields
// backend_calls, backend_bytes_read and backend_bytes_written when it
// reports them; they count every client of the store, so run nothing else
// against it. The protocol name comes from its INFO's protocol field, if
// any.
func DialRESP(ctx context.Context, addrs []string, poolSize int) (Target, error) {
	if len(addrs) == 0 {
		return nil, errors.New("bench: no server address")
	}
	t := &respTarget{}
	for _, addr := range addrs {
		c := dialRESP(addr, max(poolSize/len(addrs), 1))
		t.clients = append(t.clients, c)
		if err := c.Ping(ctx).Err(); err != nil {
			t.closeClients()
			return nil, fmt.Errorf("bench: connecting to %s: %w", addr, err)
		}
	}
	return t, nil
}

// dialRESP returns a client of one server.
func dialRESP(addr string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:            addr,
		PoolSize:        poolSize,
		Protocol:        2, // plain RESP2: no HELLO handshake needed
		ReadTimeout:     respTimeout,
		WriteTimeout:    respTimeout,
		DisableIdentity: true, // no CLIENT SETINFO on connect
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
}

type respTarget struct {
	clients []*redis.Client
	next    atomic.Uint64 // the server of the next call, modulo len(clients)

	mu     sync.Mutex
	loaded []string // keys to delete on Close
}

// c returns the client of the next call.
func (t *respTarget) c() *redis.Client {
	return t.clients[(t.next.Add(1)-1)%uint64(len(t.clients))]
}

// closeClients closes every client.
func (t *respTarget) closeClients() error {
	var errs []error
	for _, c := range t.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func (t *respTarget) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := t.c().Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (t *respTarget) Put(ctx context.Context, key string, val []byte) error {
	return t.c().Set(ctx, key, val, 0).Err()
}

// Load sends MSET batches of loadBatch keys from up to loadConnections of
// concurrency connections.
func (t *respTarget) Load(ctx context.Context, items iter.Seq2[string, []byte], concurrency int) error {
	return parallel(ctx, t.batches(items), min(concurrency, loadConnections), func(ctx context.Context, pairs []any) error {
		if err := t.c().MSet(ctx, pairs...).Err(); err != nil {
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
	info, err := t.clients[0].Info(ctx).Result()
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
		return t.c().Del(ctx, batch...).Err()
	})
	if err != nil {
		err = fmt.Errorf("deleting the benchmark's keys: %w", err)
	}
	return errors.Join(err, t.closeClients())
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
