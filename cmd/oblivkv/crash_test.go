package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	goredis "github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// durableProtocols journal their trusted state: a kill -9 loses nothing
// acknowledged.
var durableProtocols = []string{"pathoram", "taostore", "treebeard", "waffle", "cloak", "oblivistore"}

// crashOptions make each protocol's background work frequent, so kills
// land in it: treebeard evicts after every 3 path reads of a tree;
// oblivistore draws a fractional eviction rate and lets requests run only
// 4 evictions ahead of its shuffler, so kills land while requests wait on
// the eviction semaphore.
var crashOptions = map[string][]string{
	"treebeard":   {"--opt", "a=3", "--opt", "k=4"},
	"oblivistore": {"--opt", "evictionrate=1.5", "--opt", "evictionsahead=4"},
}

// TestCrashRecovery runs the real server under 16 concurrent clients and
// kills it with SIGKILL crashKills times at random moments, restarting it
// each time on the same data dir; every other restart adds 2 ms to every
// backend call, so kills land between an operation's journal record and
// its backend write too. The clients' history, acknowledged operations
// and those cut off by the kills (whose outcome is unknown) alike, must
// be linearizable (porcupine), and each client ends by reading every key
// from the last server: so every acknowledged write reads back with its
// latest acknowledged value, and the store keeps serving. Two in five
// writes are mutations (INCRBY, APPEND, SETNX), so a mutation a recovery
// applied twice, or lost after its reply, shows in their replies. Once on
// the embedded disk backend, once on Redis, for every durable protocol.
func TestCrashRecovery(t *testing.T) {
	goredis.SetLogger(quietLogger{})
	for _, protocol := range durableProtocols {
		for _, backend := range []string{"disk", "redis"} {
			t.Run(protocol+"/"+backend, func(t *testing.T) {
				spec := backend
				if backend == "redis" {
					spec = redistest.Start(t)
				}
				args := []string{"--protocol", protocol, "--capacity", "256", "--value-size", "64", "--backend", spec}
				crashRun(t, append(args, crashOptions[protocol]...))
			})
		}
	}
}

// crashRun serves a store with args, runs the clients, kills and restarts
// the server, and checks the history.
func crashRun(t *testing.T, args []string) {
	dir, addr := t.TempDir(), freeAddr(t)
	srv := startServeAt(t, dir, addr, args...)
	store := newRESPStore(addr)
	defer store.Close()
	var lastRestart atomic.Int64 // unix nanos; 0 until the last kill's restart
	var restarts []time.Time     // when each new server was up; written before done is read
	type outcome struct {
		res kvtest.LinResult
		err error
	}
	seed := kvtest.Seed(t) // the operation mix and the moments of the kills
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan outcome, 1)
	go func() {
		// The pause keeps the history of the fastest protocol (cloak,
		// answering from its cache) small enough for porcupine.
		res, err := kvtest.Linearizable(ctx, store, kvtest.LinOptions{Clients: 16, AllowErrors: true, FinalReads: true,
			Keys: 16, HotFraction: 0.2, Pause: 2 * time.Millisecond, MutationFraction: 0.4, RESPResults: true, Seed: seed,
			FailedBy: func(failed time.Time) time.Time { return firstAfter(restarts, failed) },
			Until: func() bool {
				last := lastRestart.Load()
				// go-redis fails fast for up to a second after failed dials
				// before it dials again: the clients need that long to be
				// back on the last server.
				return last != 0 && time.Since(time.Unix(0, last)) > 1500*time.Millisecond
			}})
		done <- outcome{res, err}
	}()
	r := rand.New(rand.NewPCG(seed, kvtest.ScheduleStream))
	for i := range crashKills {
		time.Sleep(time.Duration(200+r.IntN(400)) * time.Millisecond)
		if err := srv.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		srv.cmd.Wait()
		restart := args
		if i%2 == 0 {
			restart = append(append([]string{}, args...), "--backend-latency", "2ms")
		}
		srv = startServeAt(t, dir, addr, restart...)
		restarts = append(restarts, time.Now())
	}
	lastRestart.Store(time.Now().UnixNano())
	out := <-done
	if out.err != nil {
		t.Fatalf("clients: %v", out.err)
	}
	t.Logf("%d operations, %d cut off by %d kills; porcupine: %v", out.res.Ops, out.res.Errors, crashKills, out.res.Result)
	switch {
	case out.res.Result == porcupine.Illegal:
		t.Fatalf("the history across %d kills is not linearizable; visualization: %s", crashKills, out.res.Visualization)
	case out.res.Result != porcupine.Ok:
		t.Fatalf("the linearizability check timed out")
	case out.res.Errors == 0:
		t.Fatalf("no operation was cut off: the kills missed the load")
	case out.res.Errors > maxCutOff:
		// Errors are allowed in the history (their outcome is unknown), so
		// a store that fails every request after a restart would pass the
		// check: only requests in flight at a kill may fail.
		t.Fatalf("%d operations failed, more than the %d a kill can cut off; first: %v", out.res.Errors, maxCutOff, out.res.FirstErr)
	}
	fresh := newRESPStore(addr) // the clients' pool may still be backing off
	defer fresh.Close()
	for k := range 5 { // the keys of the check: every one reads back
		if _, _, err := fresh.Get(t.Context(), fmt.Sprintf("lin/%d", k)); err != nil {
			t.Fatalf("after the last restart, GET lin/%d: %v; server: %s", k, err, srv.stderr)
		}
	}
	srv.stop(t)
}

// maxCutOff bounds the operations the kills may cut off: each of the 16
// clients has one request in flight, and may find one pooled connection
// dead after a kill.
const maxCutOff = 2 * 16 * crashKills

// respStore is a kv.Store served by a RESP server, through a client that
// never retries (an operation a kill cuts off reports an error, its
// outcome unknown).
type respStore struct{ c *goredis.Client }

func newRESPStore(addr string) *respStore { return newRESPStoreWaiting(addr, 5*time.Second) }

// newRESPStoreWaiting is newRESPStore whose client waits up to wait for
// each reply.
func newRESPStoreWaiting(addr string, wait time.Duration) *respStore {
	return &respStore{c: goredis.NewClient(&goredis.Options{Addr: addr, Protocol: 2, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: wait, PoolSize: 32})}
}

// failed classifies an operation's error: a request whose connection was
// never made had no effect (kvtest.ErrNotApplied); any other failure's
// outcome is unknown. It pauses the client, so clients do not spin while
// the server restarts.
func failed(err error) error {
	time.Sleep(5 * time.Millisecond)
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: %w", kvtest.ErrNotApplied, err)
	}
	return err
}

// quietLogger drops go-redis's log lines (dial failures while the server
// restarts are expected).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func (s *respStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := s.c.Get(ctx, key).Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, failed(err)
	}
	return v, true, nil
}

func (s *respStore) Put(ctx context.Context, key string, val []byte) error {
	if err := s.c.Set(ctx, key, val, 0).Err(); err != nil {
		return failed(err)
	}
	return nil
}

func (s *respStore) Delete(ctx context.Context, key string) error {
	if err := s.c.Del(ctx, key).Err(); err != nil {
		return failed(err)
	}
	return nil
}

// Update implements kv.Updater with the mutations the check issues:
// INCRBY, APPEND and SETNX, each reporting what its reply shows
// (kvtest.LinOptions.RESPResults), a rejection as the kv error the server
// mapped to its reply.
func (s *respStore) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	var r kv.Result
	var err error
	switch {
	case m.Op == kv.MutIncrBy:
		var by, n int64
		if by, err = strconv.ParseInt(string(m.Arg), 10, 64); err != nil {
			return r, err
		}
		n, err = s.c.IncrBy(ctx, key, by).Result()
		r.New = []byte(strconv.FormatInt(n, 10))
	case m.Op == kv.MutAppend:
		var n int64
		n, err = s.c.Append(ctx, key, string(m.Arg)).Result()
		r.Len = int(n)
	case m.Op == kv.MutSet && m.If == kv.IfMissing:
		r.Written, err = s.c.SetNX(ctx, key, m.Arg, 0).Result()
	default:
		return r, fmt.Errorf("respStore: no RESP command for mutation %+v", m)
	}
	if err != nil {
		return kv.Result{}, replyErr(err)
	}
	return r, nil
}

// replyErr is the kv rejection an error reply names (resp's errorReply),
// or the failure err is.
func replyErr(err error) error {
	var reply goredis.Error
	if !errors.As(err, &reply) {
		return failed(err)
	}
	msg := strings.TrimPrefix(reply.Error(), "ERR ")
	for r := kv.Rejection(1); r.Err() != nil; r++ {
		if msg == r.Err().Error() {
			return r.Err()
		}
	}
	if strings.HasPrefix(msg, "value too large") {
		return kv.ErrValueTooLarge
	}
	return err
}

// Stats reports the server's value size (INFO oblivkv), which bounds what
// a mutation may make; nothing else. A server that does not answer INFO
// (a loaded machine, a restart under way) is asked again for up to 30 s;
// then the value size is 0, which the linearizability check refuses.
func (s *respStore) Stats() kv.Stats {
	for range 300 {
		info, err := s.c.Info(context.Background(), "oblivkv").Result()
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "value_size:"); ok && err == nil {
				n, _ := strconv.Atoi(v)
				return kv.Stats{ValueSize: n}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return kv.Stats{}
}

func (s *respStore) Close() error { return s.c.Close() }

// firstAfter returns the first of times after t (zero: none). A write the
// kill of a server cut off took effect, if at all, before that server
// died, and so before the next one served.
func firstAfter(times []time.Time, t time.Time) time.Time {
	for _, u := range times {
		if u.After(t) {
			return u
		}
	}
	return time.Time{}
}
