package resp

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/kv"
)

// TestObserve: Options.Observe is called once per command, after it ran,
// with the table's name of the command (whatever case the client used, and
// also for an arity error), UnknownCommand for any other, never a key.
func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	obs := func(name string, took time.Duration) {
		if took < 0 {
			t.Errorf("%s took %v", name, took)
		}
		mu.Lock()
		seen = append(seen, name)
		mu.Unlock()
	}
	e := startServer(t, openStore(t, kv.Config{}), Options{Observe: obs})
	nc := e.dial(t)
	exchange(t, nc, "SET secret-key v\r\n", "+OK\r\n")
	exchange(t, nc, "get secret-key\r\n", "$1\r\nv\r\n")
	exchange(t, nc, "GET\r\n", "-ERR wrong number of arguments for 'get' command\r\n")
	exchange(t, nc, "NOPE secret-key\r\n", "-ERR unknown command 'NOPE', with args beginning with: 'secret-key' \r\n")
	exchange(t, nc, "PING\r\n", "+PONG\r\n")
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"set", "get", "get", UnknownCommand, "ping"}; !slices.Equal(seen, want) {
		t.Fatalf("observed %q, want %q", seen, want)
	}
	names := CommandNames()
	if !slices.IsSorted(names) || !slices.Contains(names, "mset") || slices.Contains(names, UnknownCommand) {
		t.Fatalf("CommandNames() = %q", names)
	}
}
