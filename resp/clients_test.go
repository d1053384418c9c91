package resp

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/kv"
)

// Clients that already exist drive the server unchanged: go-redis with a
// pool and pipelines, redis-py (installed by scripts/test from PyPI), and
// redis-benchmark's default tests for the commands oblivkv has.

func TestGoRedisPoolAndPipelines(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	c := redis.NewClient(&redis.Options{Addr: env.addr, PoolSize: 8})
	t.Cleanup(func() { c.Close() })
	const workers, rounds, batch = 16, 10, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range batch {
						p.Incr(ctx, "counter")
					}
					p.Append(ctx, fmt.Sprint("log-", w), "x")
					p.SetNX(ctx, fmt.Sprint("once-", w), "1", 0)
					return nil
				})
				if err != nil {
					t.Errorf("pipeline of worker %d: %v (%d replies)", w, err, len(cmds))
					return
				}
			}
		})
	}
	wg.Wait()
	if got, err := c.Get(ctx, "counter").Int(); err != nil || got != workers*rounds*batch {
		t.Fatalf("counter = %d, %v; want %d", got, err, workers*rounds*batch)
	}
	if got, err := c.StrLen(ctx, "log-3").Result(); err != nil || got != rounds {
		t.Errorf("log-3 is %d bytes, %v; want %d", got, err, rounds)
	}
	if n, err := c.Exists(ctx, "once-0", "once-15", "once-16").Result(); err != nil || n != 2 {
		t.Errorf("EXISTS of two made keys and a missing one = %d, %v; want 2", n, err)
	}
	if st := c.PoolStats(); st.TotalConns < 2 {
		t.Errorf("the pool opened %d connections; want several", st.TotalConns)
	}
}

func TestRedisPy(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 not found: scripts/test needs it to install redis-py")
	}
	if out, err := exec.Command(python, "-c", "import redis").CombinedOutput(); err != nil {
		t.Fatalf("redis-py is not installed (scripts/test installs it: python3 -m pip install redis): %v\n%s", err, out)
	}
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	host, port, _ := strings.Cut(env.addr, ":")
	out, err := exec.Command(python, "testdata/clients/redis_py.py", host, port).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("redis-py client: %v\n%s", err, out)
	}
	if st := env.store.Stats(); st.Puts < 500 {
		t.Errorf("the store served %d writes; the script makes more than 500", st.Puts)
	}
}

// TestRedisBenchmarkSuite runs redis-benchmark's default tests for every
// command oblivkv has (its list, lrange, hash, set and zset tests need
// types oblivkv does not store).
func TestRedisBenchmarkSuite(t *testing.T) {
	bench := redistest.Require(t, "redis-benchmark")
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	port := env.addr[strings.LastIndexByte(env.addr, ':')+1:]
	out := runTool(t, bench, "-p", port, "-t", "ping_inline,ping_mbulk,set,get,incr,mset", "-n", "2000", "-q")
	mustContain(t, out, "PING_INLINE: ", "PING_MBULK: ", "SET: ", "GET: ", "INCR: ", "MSET (10 keys): ")
	if strings.Contains(out, "ERR") || strings.Contains(out, "rror") {
		t.Errorf("redis-benchmark reported errors:\n%s", out)
	}
	if got, err := env.client(t).Get(ctx, "counter:__rand_int__").Int(); err != nil || got != 2000 {
		t.Errorf("INCR's counter = %d, %v; want 2000", got, err)
	}
	if st := env.store.Stats(); st.Puts < 2000*12 || st.Gets < 2000 {
		t.Errorf("the store served %d writes and %d reads; want at least %d and 2000", st.Puts, st.Gets, 2000*12)
	}
	t.Logf("redis-benchmark:\n%s", out)
}
