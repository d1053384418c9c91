package resp

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/kv"
)

var ctx = context.Background()

func TestDataCommands(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	c := env.client(t)

	if _, err := c.Get(ctx, "missing").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET missing: %v, want redis.Nil", err)
	}
	if err := c.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if v, err := c.Get(ctx, "a").Result(); err != nil || v != "1" {
		t.Fatalf("GET a = %q, %v", v, err)
	}
	if err := c.MSet(ctx, "b", "2", "c", "").Err(); err != nil {
		t.Fatalf("MSET: %v", err)
	}
	vals, err := c.MGet(ctx, "a", "nope", "b", "c").Result()
	if want := []any{"1", nil, "2", ""}; err != nil || !reflect.DeepEqual(vals, want) {
		t.Fatalf("MGET = %#v, %v; want %#v", vals, err, want)
	}
	if n, err := c.Exists(ctx, "a", "a", "nope", "c").Result(); err != nil || n != 3 {
		t.Fatalf("EXISTS = %d, %v; want 3", n, err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 3 {
		t.Fatalf("DBSIZE = %d, %v; want 3", n, err)
	}
	if n, err := c.Del(ctx, "a", "nope", "b", "a").Result(); err != nil || n != 2 {
		t.Fatalf("DEL = %d, %v; want 2", n, err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 1 {
		t.Fatalf("DBSIZE after DEL = %d, %v; want 1", n, err)
	}
	if _, err := c.Get(ctx, "a").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET deleted: %v, want redis.Nil", err)
	}
}

// TestBinaryValues checks that values survive byte for byte.
func TestBinaryValues(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	c := env.client(t)
	val := "\x00\r\n\xff" + strings.Repeat("v", 300)
	if err := c.Set(ctx, "k\r\n", val, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k\r\n").Result(); err != nil || got != val {
		t.Fatalf("GET = %q, %v", got, err)
	}
}

// TestConnectionCommands checks the replies of a RESP2 connection
// (TestRESP3 those that differ in RESP3).
func TestConnectionCommands(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{Version: "1.2.3"})
	c := redis.NewClient(&redis.Options{Addr: env.addr, MaxRetries: -1, Protocol: 2})
	defer c.Close()
	tests := []struct {
		args []any
		want any
	}{
		{[]any{"ping"}, "PONG"},
		{[]any{"PiNg", "hello"}, "hello"},
		{[]any{"echo", "a b"}, "a b"},
		{[]any{"select", "0"}, "OK"},
		{[]any{"client", "setname", "me"}, "OK"},
		{[]any{"client", "getname"}, "me"},
		{[]any{"client", "setinfo", "lib-name", "x"}, "OK"},
		{[]any{"command", "count"}, int64(len(commands))},
		{[]any{"command"}, []any{}},
		{[]any{"command", "docs"}, []any{}},
		{[]any{"config", "get", "save"}, []any{"save", ""}},
		{[]any{"config", "get", "appendonly"}, []any{"appendonly", "no"}},
		{[]any{"config", "get", "nothing*"}, []any{}},
		{[]any{"hello"}, []any{"server", "oblivkv", "version", "1.2.3", "proto", int64(2), "id", nil,
			"mode", "standalone", "role", "master", "modules", []any{}}},
	}
	for _, tt := range tests {
		got, err := c.Do(ctx, tt.args...).Result()
		if err != nil {
			t.Errorf("%v: %v", tt.args, err)
			continue
		}
		if g, ok := got.([]any); ok && len(g) == 14 {
			g[7] = nil // the connection id
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v = %#v, want %#v", tt.args, got, tt.want)
		}
	}
}

func TestErrorReplies(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	c := env.client(t)
	tests := []struct {
		args []any
		want string
	}{
		{[]any{"foo", "a", "b"}, "ERR unknown command 'foo', with args beginning with: 'a' 'b' "},
		{[]any{"foo"}, "ERR unknown command 'foo', with args beginning with: "},
		{[]any{"get"}, "ERR wrong number of arguments for 'get' command"},
		{[]any{"GET", "a", "b"}, "ERR wrong number of arguments for 'get' command"},
		{[]any{"set", "a"}, "ERR wrong number of arguments for 'set' command"},
		{[]any{"mset", "a", "1", "b"}, "ERR wrong number of arguments for 'mset' command"},
		{[]any{"ping", "a", "b"}, "ERR wrong number of arguments for 'ping' command"},
		{[]any{"set", "a", "1", "ex", "10"}, "ERR SET EX " + noExpiry},
		{[]any{"set", "a", "1", "NX", "xx"}, "ERR syntax error"},
		{[]any{"set", "a", "1", "keepttl"}, "ERR SET KEEPTTL " + noExpiry},
		{[]any{"set", "a", "1", "fast"}, "ERR syntax error"},
		{[]any{"incrby", "a", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"decrby", "a", "-9223372036854775808"}, "ERR decrement would overflow"},
		{[]any{"incrbyfloat", "a", "nan"}, "ERR value is not a valid float"},
		{[]any{"msetnx", "a", "1", "b"}, "ERR wrong number of arguments for 'msetnx' command"},
		{[]any{"expire", "a", "10"}, "ERR EXPIRE " + noExpiry},
		{[]any{"scan", "0"}, "ERR SCAN " + noListing},
		{[]any{"subscribe", "news"}, "ERR SUBSCRIBE " + noPubSub},
		{[]any{"select", "1"}, "ERR DB index is out of range"},
		{[]any{"select", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"hello", "4"}, "NOPROTO sorry, this protocol version is not supported"},
		{[]any{"hello", "x"}, "ERR Protocol version is not an integer or out of range"},
		{[]any{"client", "kill", "x"}, "ERR unknown subcommand 'kill'. Try CLIENT HELP."},
		{[]any{"client", "setname", "a b"}, errBadName},
		{[]any{"config", "set", "save", ""}, "ERR unknown subcommand 'set'. Try CONFIG HELP."},
		{[]any{"auth", "pw"}, errNoPassword},
	}
	for _, tt := range tests {
		if err := c.Do(ctx, tt.args...).Err(); errText(err) != tt.want {
			t.Errorf("%v: %q, want %q", tt.args, errText(err), tt.want)
		}
	}
	// None of them wrote anything.
	if st := env.store.Stats(); st.Puts != 0 || st.Keys != 0 {
		t.Fatalf("store touched: %+v", st)
	}
}

// TestStoreLimits checks the replies to values and keys over the store's
// sizes and to a full store, and that the store is left untouched.
func TestStoreLimits(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{Capacity: 2, ValueSize: 64, MaxKeySize: 8}), Options{})
	c := env.client(t)
	before := env.store.Stats()
	err := c.Set(ctx, "k", strings.Repeat("x", 65), 0).Err()
	if got := errText(err); !strings.HasPrefix(got, "ERR value too large: ") || !strings.Contains(got, "65 bytes, limit 64") {
		t.Fatalf("oversized SET: %q", got)
	}
	if got := errText(c.Set(ctx, "longerthan8", "v", 0).Err()); !strings.HasPrefix(got, "ERR key too large: ") {
		t.Fatalf("oversized key: %q", got)
	}
	if err := c.MSet(ctx, "a", "1", "b", strings.Repeat("y", 100)).Err(); !strings.HasPrefix(errText(err), "ERR value too large") {
		t.Fatalf("oversized MSET: %v", err)
	}
	after := env.store.Stats()
	if after.Backend.BytesWritten != before.Backend.BytesWritten+1 || after.Keys != 1 {
		t.Fatalf("only MSET's first pair should have been written: before %+v, after %+v", before, after)
	}
	c.Set(ctx, "b", "2", 0)
	if got := errText(c.Set(ctx, "c", "3", 0).Err()); got != "ERR store full: no room for a new key" {
		t.Fatalf("SET in a full store: %q", got)
	}
}

func TestInfo(t *testing.T) {
	hook := func() []InfoSection {
		return []InfoSection{
			{Name: "Oblivkv", Fields: []InfoField{{"stash_limit", "64"}}},
			{Name: "Extra", Fields: []InfoField{{"bad key:x", "a\r\nb"}}},
		}
	}
	env := startServer(t, openStore(t, kv.Config{}), Options{Version: "9.9", Info: hook})
	c := env.client(t)
	c.Set(ctx, "k", "v", 0)
	c.Get(ctx, "k")
	info, err := c.Info(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, info, "# Server\r\noblivkv_version:9.9\r\n",
		"# Oblivkv\r\nprotocol:plain\r\ncapacity:65536\r\nvalue_size:1024\r\nmax_key_size:256\r\nstash_limit:64\r\n"+
			"gets:1\r\nputs:1\r\ndeletes:0\r\nops:2\r\nkeys:1\r\nbackend_calls:",
		"\r\nbackend_bytes_written:", "# Clients\r\nconnected_clients:1\r\n",
		"# Stats\r\ntotal_connections_received:", "# Keyspace\r\ndb0:keys=1,", "# Extra\r\nbad_key_x:a__b\r\n")
	for _, arg := range []string{"all", "default", "everything"} {
		if all, err := c.Info(ctx, arg).Result(); err != nil || !strings.Contains(all, "# Oblivkv\r\n") {
			t.Errorf("INFO %s does not show the Oblivkv section (%v):\n%s", arg, err, all)
		}
	}
	stats, err := c.Info(ctx, "STATS").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stats, "# Stats\r\n") || strings.Contains(stats, "# Server") || strings.Contains(stats, "gets:") {
		t.Fatalf("INFO stats:\n%s", stats)
	}
}

// TestInfoOblivkv checks that INFO oblivkv alone shows what the README
// promises: the protocol, its parameters and its backend traffic.
func TestInfoOblivkv(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{Protocol: "pathoram", Capacity: 64, ValueSize: 32}), Options{})
	c := env.client(t)
	c.Set(ctx, "k", "v", 0)
	info, err := c.Info(ctx, "oblivkv").Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(info, "# ") != 1 || !strings.HasPrefix(info, "# Oblivkv\r\nprotocol:pathoram\r\ncapacity:64\r\nvalue_size:32\r\n") {
		t.Fatalf("INFO oblivkv should be the Oblivkv section alone:\n%s", info)
	}
	fields := map[string]string{}
	for line := range strings.SplitSeq(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	for _, name := range []string{"puts", "backend_calls", "backend_bytes_read", "backend_bytes_written", "tree_levels"} {
		if v := fields[name]; v == "" || v == "0" {
			t.Errorf("INFO oblivkv %s = %q, want a positive count:\n%s", name, v, info)
		}
	}
}

func TestQuit(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	nc := env.dial(t)
	nc.Write([]byte("QUIT\r\nPING\r\n"))
	expectClose(t, nc, "+OK\r\n")
}

// TestNoKeysInLogs checks that neither keys nor values reach the log, even
// at debug level and on errors.
func TestNoKeysInLogs(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{ValueSize: 16}), Options{})
	c := env.client(t)
	c.Set(ctx, "secretkey", "secretvalue", 0)
	c.Set(ctx, "secretkey", strings.Repeat("secretvalue", 4), 0)
	c.Do(ctx, "secretcommand", "secretkey")
	nc := env.dial(t)
	nc.Write([]byte("*2\r\n$3\r\nGET\r\n$9\r\nsecretkey\r\n*1\r\n+secret\r\n"))
	expectClose(t, nc, "$11\r\nsecretvalue\r\n-ERR Protocol error: expected '$', got '+'\r\n")
	if logs := env.logs.String(); strings.Contains(logs, "secret") {
		t.Fatalf("log mentions a key or value:\n%s", logs)
	}
}

// TestStringCommands runs each string command against a live server and
// checks its reply as Redis gives it.
func TestStringCommands(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{ValueSize: 24}), Options{})
	c := env.client(t)
	tests := []struct {
		args []any
		want any // a reply value, or "ERR ..." for an error
	}{
		{[]any{"incr", "n"}, int64(1)},
		{[]any{"incrby", "n", "10"}, int64(11)},
		{[]any{"decr", "n"}, int64(10)},
		{[]any{"decrby", "n", "12"}, int64(-2)},
		{[]any{"incrbyfloat", "n", "0.5"}, "-1.5"},
		{[]any{"incr", "n"}, "ERR value is not an integer or out of range"},
		{[]any{"set", "n", "9223372036854775807"}, "OK"},
		{[]any{"incr", "n"}, "ERR increment or decrement would overflow"},
		{[]any{"get", "n"}, "9223372036854775807"},
		{[]any{"append", "s", "hello"}, int64(5)},
		{[]any{"append", "s", " world"}, int64(11)},
		{[]any{"append", "s", "!!!!!!!!!!!!!!"}, "ERR value too large: value larger than the store's value size: 25 bytes, limit 24"},
		{[]any{"strlen", "s"}, int64(11)},
		{[]any{"strlen", "none"}, int64(0)},
		{[]any{"type", "s"}, "string"},
		{[]any{"type", "none"}, "none"},
		{[]any{"setnx", "s", "x"}, int64(0)},
		{[]any{"setnx", "t", "x"}, int64(1)},
		{[]any{"set", "t", "y", "nx"}, nil},
		{[]any{"set", "t", "y", "xx", "get"}, "x"},
		{[]any{"set", "u", "y", "xx"}, nil},
		{[]any{"set", "u", "z", "NX", "GET"}, nil},
		{[]any{"getset", "u", "w"}, "z"},
		{[]any{"getdel", "u"}, "w"},
		{[]any{"getdel", "u"}, nil},
		{[]any{"exists", "s", "t", "u", "s"}, int64(3)},
		{[]any{"msetnx", "a", "1", "b", "2"}, int64(1)},
		{[]any{"msetnx", "c", "3", "a", "9"}, int64(0)},
		{[]any{"mget", "a", "b", "c"}, []any{"1", "2", nil}},
		{[]any{"unlink", "a", "b", "c"}, int64(2)},
		{[]any{"del", "s", "t"}, int64(2)},
		{[]any{"dbsize"}, int64(1)},
	}
	for _, tt := range tests {
		got, err := c.Do(ctx, tt.args...).Result()
		if err == redis.Nil {
			got, err = nil, nil
		}
		if err != nil {
			got = errText(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v = %#v, want %#v", tt.args, got, tt.want)
		}
	}
}

// TestRESP3 checks HELLO 3 switches a connection to RESP3, whose replies
// differ from RESP2's in the null and in maps; a HELLO that fails
// (a version unknown, a wrong password) changes nothing.
func TestRESP3(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{Version: "1.2.3"})
	nc := env.dial(t)
	exchange(t, nc, "HELLO 4\r\n", "-NOPROTO sorry, this protocol version is not supported\r\n")
	exchange(t, nc, "HELLO 3 AUTH default wrong\r\n", "-"+errNoPassword+"\r\n")
	exchange(t, nc, "GET missing\r\n", "$-1\r\n")
	exchange(t, nc, "HELLO 3\r\n", "%7\r\n$6\r\nserver\r\n$7\r\noblivkv\r\n$7\r\nversion\r\n$5\r\n1.2.3\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:")
	exchange(t, nc, "", "1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n")
	exchange(t, nc, "GET missing\r\n", "_\r\n")
	exchange(t, nc, "CONFIG GET appendonly\r\n", "%1\r\n$10\r\nappendonly\r\n$2\r\nno\r\n")
	exchange(t, nc, "COMMAND DOCS\r\n", "%0\r\n")
	exchange(t, nc, "COMMAND INFO get\r\n", "*1\r\n_\r\n")
	exchange(t, nc, "SET k v\r\nGET k\r\n", "+OK\r\n$1\r\nv\r\n")
	exchange(t, nc, "HELLO 2\r\n", "*14\r\n")
	c := env.client(t) // go-redis asks for RESP3 by default
	if m, err := c.Do(ctx, "hello").Result(); err != nil || m.(map[any]any)["proto"] != int64(3) {
		t.Fatalf("go-redis's HELLO: %#v, %v; want a RESP3 map", m, err)
	}
	if _, err := c.Get(ctx, "nothing").Result(); err != redis.Nil {
		t.Fatalf("GET of a missing key over RESP3: %v, want redis.Nil", err)
	}
}
