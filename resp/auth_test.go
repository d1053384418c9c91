package resp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/auth"
	"github.com/oblivkv/oblivkv/kv"
)

// testUsers are the default user with the password "top" (--requirepass),
// alice (read-write, "wonderland") and reports (read-only, "numbers").
func testUsers(t *testing.T) *auth.Users {
	t.Helper()
	cheap := auth.Params{Memory: 64, Time: 1, Threads: 1}
	u := auth.NewUsers()
	for _, user := range []struct {
		name, password string
		perm           auth.Permission
	}{{"alice", "wonderland", auth.ReadWrite}, {"reports", "numbers", auth.ReadOnly}} {
		h, err := auth.HashWith([]byte(user.password), cheap)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Add(user.name, user.perm, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.AddPassword(auth.DefaultUser, auth.ReadWrite, "top"); err != nil {
		t.Fatal(err)
	}
	return u
}

func startAuthServer(t *testing.T) *testEnv {
	t.Helper()
	return startServer(t, openStore(t, kv.Config{}), Options{Users: testUsers(t)})
}

// TestNoPasswordOnlyPingAuthHelloQuit checks what a connection that has not
// authenticated may do: PING, AUTH, HELLO (only with its AUTH option) and
// QUIT; anything else, unknown commands too, is answered NOAUTH and does
// not reach the store.
func TestNoPasswordOnlyPingAuthHelloQuit(t *testing.T) {
	env := startAuthServer(t)
	nc := env.dial(t)
	exchange(t, nc, "PING\r\n", "+PONG\r\n")
	for _, cmd := range []string{"GET k", "SET k v", "DEL k", "INFO", "CLIENT LIST", "NOSUCH x", "SELECT 0", "CONFIG GET save"} {
		exchange(t, nc, cmd+"\r\n", "-"+errNoAuth+"\r\n")
	}
	exchange(t, nc, "HELLO\r\n", "-"+errHelloNoAuth+"\r\n")
	exchange(t, nc, "HELLO 2 SETNAME app\r\n", "-"+errHelloNoAuth+"\r\n")
	exchange(t, nc, "QUIT\r\n", "+OK\r\n")
	if st := env.store.Stats(); st.Ops() != 0 || st.Keys != 0 {
		t.Fatalf("an unauthenticated connection reached the store: %+v", st)
	}
	c := redis.NewClient(&redis.Options{Addr: env.addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); errText(err) != errNoAuth {
		t.Fatalf("go-redis SET without a password: %v, want %q", err, errNoAuth)
	}
}

// openBeforeAuth are the commands a connection may run before it
// authenticates.
var openBeforeAuth = []string{"ping", "auth", "hello", "quit"}

// TestAuthGateCoversEveryCommand takes every command of the server's table
// (so a new command is covered without editing the test), with as many
// arguments as its arity asks: before authentication each one but PING,
// AUTH, HELLO and QUIT is answered NOAUTH, and for a read-only user each
// write command is answered NOPERM, and none reaches the store.
func TestAuthGateCoversEveryCommand(t *testing.T) {
	for _, v := range gateViolations(t) {
		t.Error(v)
	}
}

// TestAuthGateCatchesLeaks widens the gate as a realistic bug would, one
// command at a time, and requires TestAuthGateCoversEveryCommand's check
// to fail: STRLEN allowed before AUTH, GETDEL (a write) allowed to a
// read-only user.
func TestAuthGateCatchesLeaks(t *testing.T) {
	for _, leak := range []struct {
		name    string
		allowed map[string]bool
		command string
	}{{"strlen before AUTH", beforeAuth, "strlen"}, {"getdel read-only", readOnly, "getdel"}} {
		t.Run(leak.name, func(t *testing.T) {
			leak.allowed[leak.command] = true
			t.Cleanup(func() { delete(leak.allowed, leak.command) })
			v := gateViolations(t)
			if len(v) == 0 {
				t.Fatal("the gate's check passed a server that lets the command through")
			}
			t.Log(v)
		})
	}
}

// gateViolations sends every command of the server's table, with as many
// arguments as its arity asks, before AUTH and as a read-only user, and
// returns each answer that is not NOAUTH (but for PING, AUTH, HELLO and
// QUIT) or NOPERM (for a write), and any refused command that reached the
// store.
func gateViolations(t *testing.T) []string {
	env := startAuthServer(t)
	anonymous := newReplies(t, env)
	readOnlyUser := newReplies(t, env)
	if got := readOnlyUser.send("auth", "reports", "numbers"); got != "+OK" {
		t.Fatalf("AUTH reports: %q", got)
	}
	var out []string
	for _, name := range CommandNames() {
		args := requestOf(commands[name])
		if !slices.Contains(openBeforeAuth, name) {
			if got := anonymous.send(args...); got != "-"+errNoAuth {
				out = append(out, fmt.Sprintf("%v before AUTH: %q, want NOAUTH", args, got))
			}
		}
		if slices.Contains(writes, name) {
			want := "-NOPERM User reports has no permissions to run the '" + name + "' command"
			if got := readOnlyUser.send(args...); got != want {
				out = append(out, fmt.Sprintf("%v by a read-only user: %q, want %q", args, got, want))
			}
		}
	}
	if st := env.store.Stats(); st.Ops() != 0 || st.Keys != 0 {
		out = append(out, fmt.Sprintf("a refused command reached the store: %+v", st))
	}
	return out
}

// requestOf returns cmd's name and as many arguments as its arity asks.
func requestOf(cmd *command) []string {
	args := []string{cmd.name}
	for i := 1; i < max(cmd.arity, -cmd.arity); i++ {
		args = append(args, fmt.Sprint("a", i))
	}
	return args
}

// replies sends requests on one connection and reads the first line of
// each reply.
type replies struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func newReplies(t *testing.T, env *testEnv) *replies {
	nc := env.dial(t)
	return &replies{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *replies) send(args ...string) string {
	c.t.Helper()
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	c.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.nc, req); err != nil {
		c.t.Fatal(err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("sent %v: %v", args, err)
	}
	return strings.TrimSuffix(line, "\r\n")
}

// TestWrongPassword checks AUTH's and HELLO's answer to a wrong password
// or an unknown user, that the failure is logged with the user name and
// the client's address but not the password, and that the connection stays
// as it was.
func TestWrongPassword(t *testing.T) {
	env := startAuthServer(t)
	nc := env.dial(t)
	wrong := "-" + errWrongPass + "\r\n"
	exchange(t, nc, "AUTH hunter2\r\n", wrong)
	exchange(t, nc, "AUTH alice hunter3\r\n", wrong)
	exchange(t, nc, "AUTH mallory wonderland\r\n", wrong)
	exchange(t, nc, "AUTH reports top\r\n", wrong)
	exchange(t, nc, "HELLO 2 AUTH alice hunter4 SETNAME app\r\n", wrong)
	exchange(t, nc, "GET k\r\n", "-"+errNoAuth+"\r\n")
	exchange(t, nc, "AUTH a b c\r\n", "-ERR wrong number of arguments for 'auth' command\r\n")

	exchange(t, nc, "AUTH alice wonderland\r\n", "+OK\r\n")
	exchange(t, nc, "CLIENT GETNAME\r\n", "$-1\r\n") // the failed HELLO set no name
	exchange(t, nc, "AUTH alice hunter5\r\n", wrong)
	exchange(t, nc, "SET k v\r\n", "+OK\r\n") // still alice

	logs := env.logs.String()
	for _, pw := range []string{"hunter", "wonderland", "top"} {
		if strings.Contains(logs, pw) {
			t.Errorf("the log holds a password (%q):\n%s", pw, logs)
		}
	}
	local := nc.LocalAddr().String()
	for _, user := range []string{"default", "alice", "mallory", "reports"} {
		if !strings.Contains(logs, `msg="resp: authentication failed" user=`+user+" ") {
			t.Errorf("no failed attempt logged for %s:\n%s", user, logs)
		}
	}
	if n := strings.Count(logs, "addr="+local); n != 6 {
		t.Errorf("%d failures logged with the client's address %s, want 6:\n%s", n, local, logs)
	}
}

// TestAuthForms checks both forms of AUTH and HELLO's AUTH option, and a
// go-redis client given a password (it tries HELLO 3 AUTH, then AUTH).
func TestAuthForms(t *testing.T) {
	env := startAuthServer(t)
	nc := env.dial(t)
	exchange(t, nc, "AUTH top\r\n", "+OK\r\n")
	exchange(t, nc, "SET k v\r\n", "+OK\r\n")

	nc = env.dial(t)
	exchange(t, nc, "AUTH alice wonderland\r\n", "+OK\r\n")
	exchange(t, nc, "GET k\r\n", "$1\r\nv\r\n")

	nc = env.dial(t)
	exchange(t, nc, "HELLO 2 AUTH reports numbers SETNAME app\r\n", "*14\r\n$6\r\nserver\r\n$7\r\noblivkv\r\n")

	for _, opts := range []redis.Options{
		{Password: "top"},
		{Username: "alice", Password: "wonderland"},
		{Username: "alice", Password: "wonderland", Protocol: 2},
	} {
		opts.Addr, opts.MaxRetries = env.addr, -1
		c := redis.NewClient(&opts)
		if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
			t.Errorf("go-redis as %q: GET = %q, %v", opts.Username, v, err)
		}
		c.Close()
	}
}

// TestReadOnlyUserWriting checks that a read-only user reads, and that
// every write is refused with NOPERM naming the user and the command,
// before it reaches the store.
func TestReadOnlyUserWriting(t *testing.T) {
	env := startAuthServer(t)
	admin := redis.NewClient(&redis.Options{Addr: env.addr, Password: "top", MaxRetries: -1})
	defer admin.Close()
	if err := admin.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ro := redis.NewClient(&redis.Options{Addr: env.addr, Username: "reports", Password: "numbers", MaxRetries: -1})
	defer ro.Close()
	if v, err := ro.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("read-only GET = %q, %v", v, err)
	}
	if n, err := ro.Exists(ctx, "k").Result(); err != nil || n != 1 {
		t.Fatalf("read-only EXISTS = %d, %v", n, err)
	}
	before := env.store.Stats()
	for _, args := range [][]any{{"set", "k", "w"}, {"SET", "x", "y"}, {"del", "k"}, {"mset", "k", "w"}} {
		name := strings.ToLower(args[0].(string))
		want := "NOPERM User reports has no permissions to run the '" + name + "' command"
		if err := ro.Do(ctx, args...).Err(); errText(err) != want {
			t.Errorf("read-only %v: %q, want %q", args, errText(err), want)
		}
	}
	if after := env.store.Stats(); after.Puts != before.Puts || after.Deletes != before.Deletes || after.Gets != before.Gets {
		t.Fatalf("refused writes reached the store: before %+v, after %+v", before, after)
	}
	if v, _ := admin.Get(ctx, "k").Result(); v != "v" {
		t.Fatalf("k = %q after the refused writes, want v", v)
	}
}

// TestNoUsersNoAuth checks the server without users: every connection may
// run everything, and AUTH is answered as Redis answers it with no
// password configured.
func TestNoUsersNoAuth(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	nc := env.dial(t)
	exchange(t, nc, "SET k v\r\n", "+OK\r\n")
	exchange(t, nc, "AUTH x\r\n", "-"+errNoPassword+"\r\n")
	exchange(t, nc, "HELLO 2 AUTH default x\r\n", "-"+errNoPassword+"\r\n")
	exchange(t, nc, "GET k\r\n", "$1\r\nv\r\n")
}

// writes are the commands that change the store.
var writes = []string{"set", "del", "mset", "unlink", "incr", "decr", "incrby", "decrby",
	"incrbyfloat", "append", "setnx", "getset", "getdel", "msetnx"}

// TestEveryCommandIsReadOrWrite makes each command of the table a decision:
// one that read-only users may run (readOnly), or a write. A new command
// is refused to read-only users until it is listed in readOnly, and this
// test fails until it is listed in one of the two.
func TestEveryCommandIsReadOrWrite(t *testing.T) {
	for _, name := range CommandNames() {
		if readOnly[name] == slices.Contains(writes, name) {
			t.Errorf("command %q: list it in readOnly (auth.go) or in writes (auth_test.go), not both", name)
		}
	}
	for name := range readOnly {
		if commands[name] == nil {
			t.Errorf("readOnly lists %q, which is not a command", name)
		}
	}
}
