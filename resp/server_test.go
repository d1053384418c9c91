package resp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/kv"
)

func TestRawInlineAndPipelining(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	nc := env.dial(t)
	exchange(t, nc, "SET a \"x y\"\r\nGET a\r\nget nope\n", "+OK\r\n$3\r\nx y\r\n$-1\r\n")
	var send, want strings.Builder
	for i := range 500 {
		send.WriteString("*2\r\n$4\r\nECHO\r\n$3\r\n")
		send.WriteString(string(rune('a'+i%26)) + "bc\r\n")
		want.WriteString("$3\r\n" + string(rune('a'+i%26)) + "bc\r\n")
	}
	send.WriteString("MGET a nope\r\nDEL a a\r\nEXISTS a\r\n")
	want.WriteString("*2\r\n$3\r\nx y\r\n$-1\r\n:1\r\n:0\r\n")
	exchange(t, nc, send.String(), want.String())
}

// TestRawMalformed sends malformed requests: each gets the error reply and
// the connection is closed; requests before it are answered, and the
// server goes on serving.
func TestRawMalformed(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{MaxBulkLen: 1024, MaxArrayLen: 16, MaxInlineLen: 128})
	tests := []struct{ name, send, want string }{
		{"bad type byte", "*1\r\n:1\r\n", "expected '$', got ':'"},
		{"negative bulk", "*1\r\n$-2\r\n", "invalid bulk length"},
		{"bulk over limit", "*2\r\n$3\r\nGET\r\n$1025\r\n", "invalid bulk length"},
		{"non-numeric bulk", "*1\r\n$abc\r\n", "invalid bulk length"},
		{"array over limit", "*17\r\n", "invalid multibulk length"},
		{"non-numeric array", "*?\r\n", "invalid multibulk length"},
		{"missing CRLF", "*1\r\n$4\r\nPINGPONG\r\n", `expected '\r\n'`},
		{"inline too long", strings.Repeat("a", 200) + "\r\n", "too big inline request"},
		{"unbalanced quotes", "SET \"a b\r\n", "unbalanced quotes in request"},
		{"after a valid request", "PING\r\n*1\r\n$x\r\n", "invalid bulk length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc := env.dial(t)
			nc.Write([]byte(tt.send))
			want := "-ERR Protocol error: " + tt.want + "\r\n"
			if strings.HasPrefix(tt.send, "PING") {
				want = "+PONG\r\n" + want
			}
			expectClose(t, nc, want)
		})
	}
	exchange(t, env.dial(t), "PING\r\n", "+PONG\r\n")
	if st := env.store.Stats(); st.Ops() != 0 {
		t.Fatalf("malformed requests reached the store: %+v", st)
	}
}

// TestTruncatedRequest checks that a request cut by the client's close is
// not run.
func TestTruncatedRequest(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	nc := env.dial(t)
	nc.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nab"))
	nc.(*net.TCPConn).CloseWrite()
	expectClose(t, nc, "")
	if st := env.store.Stats(); st.Puts != 0 {
		t.Fatalf("a truncated SET reached the store: %+v", st)
	}
}

// TestHugeBulkRejected sends a 100 MB bulk header and part of its body: the
// error reply must come from the header, while another client keeps being
// served.
func TestHugeBulkRejected(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{})
	other := env.client(t)
	if err := other.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { keepServed(t, other, stop) })

	nc := env.dial(t)
	go func() {
		nc.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n"))
		nc.Write(make([]byte, 64<<10)) // the start of the body; the rest never comes
	}()
	expectClose(t, nc, "-ERR Protocol error: invalid bulk length\r\n")
	close(stop)
	wg.Wait()
	if v, err := other.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the refused SET wrote k=%q (%v)", v, err)
	}
}

// keepServed runs GETs on c until stop, failing on any error.
func keepServed(t *testing.T, c *redis.Client, stop chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			if n == 0 {
				t.Error("the other client ran no request")
			}
			return
		default:
		}
		if v, err := c.Get(ctx, "a").Result(); err != nil || v != "1" {
			t.Errorf("other client: GET a = %q, %v", v, err)
			return
		}
	}
}

func TestMaxClients(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{MaxClients: 2})
	first, second := env.dial(t), env.dial(t)
	exchange(t, first, "PING\r\n", "+PONG\r\n")
	exchange(t, second, "PING\r\n", "+PONG\r\n")
	expectClose(t, env.dial(t), "-ERR max number of clients reached\r\n")
	first.Close()
	// The slot is freed once the server has seen the close.
	deadline := time.Now().Add(5 * time.Second)
	for len(env.srv.clients()) > 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	exchange(t, env.dial(t), "PING\r\n", "+PONG\r\n")
}

func TestIdleTimeout(t *testing.T) {
	env := startServer(t, openStore(t, kv.Config{}), Options{IdleTimeout: 100 * time.Millisecond})
	nc := env.dial(t)
	exchange(t, nc, "PING\r\n", "+PONG\r\n")
	start := time.Now()
	expectClose(t, nc, "")
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("closed after %v, before the idle timeout", took)
	}
}

// blockingStore blocks every Get until release is closed.
type blockingStore struct {
	kv.Store
	started chan struct{}
	release chan struct{}
}

func (b *blockingStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	return b.Store.Get(ctx, key)
}

// TestShutdownWaitsForRequests checks that Shutdown closes idle
// connections at once, lets a running request finish and answer, and
// stops accepting.
func TestShutdownWaitsForRequests(t *testing.T) {
	store := &blockingStore{Store: openStore(t, kv.Config{}), started: make(chan struct{}), release: make(chan struct{})}
	env := startServer(t, store, Options{})
	idle, busy := env.dial(t), env.dial(t)
	exchange(t, idle, "PING\r\n", "+PONG\r\n")
	busy.Write([]byte("GET k\r\nPING\r\n"))
	<-store.started

	done := make(chan error, 1)
	go func() { done <- env.srv.Shutdown(context.Background()) }()
	expectClose(t, idle, "")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while a request was running", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(store.release)
	expectClose(t, busy, "$-1\r\n") // the pipelined PING is not run
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if nc, err := net.DialTimeout("tcp", env.addr, time.Second); err == nil {
		nc.SetReadDeadline(time.Now().Add(time.Second))
		_, rerr := nc.Read(make([]byte, 1))
		nc.Close()
		if rerr == nil {
			t.Fatal("a connection after Shutdown was served")
		}
	}
}

// TestShutdownDeadline checks that Shutdown gives up at its context's end,
// cancelling the store call in flight.
func TestShutdownDeadline(t *testing.T) {
	store := &blockingStore{Store: openStore(t, kv.Config{}), started: make(chan struct{}), release: make(chan struct{})}
	env := startServer(t, store, Options{})
	busy := env.dial(t)
	busy.Write([]byte("GET k\r\n"))
	<-store.started
	sctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := env.srv.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(busy); err != nil {
		t.Fatalf("connection not closed: %v", err)
	}
}

// errStore fails every call with err.
type errStore struct {
	kv.Store
	err error
}

func (e errStore) Get(context.Context, string) ([]byte, bool, error) { return nil, false, e.err }
func (e errStore) Put(context.Context, string, []byte) error         { return e.err }
func (e errStore) Delete(context.Context, string) error              { return e.err }
func (e errStore) Update(context.Context, string, kv.Mutation) (kv.Result, error) {
	return kv.Result{}, e.err
}

func TestStoreErrors(t *testing.T) {
	tests := []struct {
		err    error
		want   string
		logged bool
	}{
		{kv.ErrTampered, "ERR storage integrity check failed", true},
		{fmt.Errorf("wrapped: %w", kv.ErrTampered), "ERR storage integrity check failed", true},
		{kv.ErrClosed, "ERR server shutting down", false},
		{context.Canceled, "ERR server shutting down", false},
		{kv.ErrFull, "ERR store full: no room for a new key", false},
		{fmt.Errorf("a shard gave it up: %w", kv.ErrUnavailable), "ERR unavailable: the request did not complete; a write's outcome is unknown, read the key before writing it again", true},
		{errors.New("backend unreachable"), "ERR internal error", true},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			env := startServer(t, errStore{openStore(t, kv.Config{}), tt.err}, Options{})
			nc := env.dial(t)
			want := strings.Repeat("-"+tt.want+"\r\n", 4) + "*1\r\n-" + tt.want + "\r\n"
			exchange(t, nc, "GET k\r\nSET k v\r\nDEL k\r\nEXISTS k\r\nMGET k\r\n", want)
			if logged := strings.Contains(env.logs.String(), "store call failed"); logged != tt.logged {
				t.Errorf("logged = %v, want %v", logged, tt.logged)
			}
		})
	}
}

// panicStore panics in Get.
type panicStore struct{ kv.Store }

func (panicStore) Get(context.Context, string) ([]byte, bool, error) { panic("bug") }
func (p panicStore) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	return kv.Update(ctx, p.Store, key, m)
}

func TestPanicClosesOnlyItsConnection(t *testing.T) {
	env := startServer(t, panicStore{openStore(t, kv.Config{})}, Options{})
	other := env.dial(t)
	exchange(t, other, "PING\r\n", "+PONG\r\n")
	nc := env.dial(t)
	nc.Write([]byte("GET k\r\n"))
	expectClose(t, nc, "")
	exchange(t, other, "SET k v\r\n", "+OK\r\n")
	mustContain(t, env.logs.String(), "panic serving a client")
}

func TestListenAndServe(t *testing.T) {
	store := openStore(t, kv.Config{})
	t.Cleanup(func() { store.Close() })
	srv := NewServer(store, Options{})
	if err := srv.ListenAndServe("127.0.0.1:-1"); err == nil {
		t.Fatal("ListenAndServe on a bad address succeeded")
	}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe("127.0.0.1:0") }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		srv.mu.Lock()
		n := len(srv.listeners)
		srv.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not listening")
		}
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ListenAndServe = %v, want ErrServerClosed", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown = %v, want ErrServerClosed", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve after Shutdown left its listener open: %v", err)
	}
}
