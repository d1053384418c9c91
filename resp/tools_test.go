package resp

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/internal/redistest"
	"github.com/oblivkv/oblivkv/kv"
)

func runTool(t *testing.T, path string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", path, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRedisCLI(t *testing.T) {
	cli := redistest.Require(t, "redis-cli")
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	port := env.addr[strings.LastIndexByte(env.addr, ':')+1:]
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "a", "b"}, "OK"},
		{[]string{"GET", "a"}, "b"},
		{[]string{"DEL", "a"}, "1"},
		{[]string{"GET", "a"}, ""},
		{[]string{"set", "a", "b", "ex", "1"}, "ERR SET EX " + noExpiry},
		{[]string{"INCR", "n"}, "1"},
		{[]string{"INCRBY", "n", "41"}, "42"},
		{[]string{"KEYS", "*"}, "ERR KEYS " + noListing},
		{[]string{"DBSIZE"}, "1"},
	} {
		out := runTool(t, cli, append([]string{"-p", port}, step.args...)...)
		if got := strings.TrimSpace(out); got != step.want {
			t.Errorf("redis-cli %v: %q, want %q", step.args, got, step.want)
		}
	}
}

func TestRedisBenchmark(t *testing.T) {
	bench := redistest.Require(t, "redis-benchmark")
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	port := env.addr[strings.LastIndexByte(env.addr, ':')+1:]
	out := runTool(t, bench, "-p", port, "-t", "get,set", "-n", "2000", "-q")
	mustContain(t, out, "SET: ", "GET: ", "requests per second")
	if strings.Contains(out, "ERR") || strings.Contains(out, "rror") {
		t.Errorf("redis-benchmark reported errors:\n%s", out)
	}
	if st := env.store.Stats(); st.Puts < 2000 || st.Gets < 2000 {
		t.Errorf("the store served %d puts and %d gets, want at least 2000 of each", st.Puts, st.Gets)
	}
	t.Logf("redis-benchmark:\n%s", out)
}
