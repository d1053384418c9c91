package resp

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
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
