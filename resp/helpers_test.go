package resp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/testsupport/syncbuf"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	_ "github.com/oblivkv/oblivkv/protocol/all"
)

// openStore opens a "plain" store over a memory backend; cfg may set
// Capacity and ValueSize.
func openStore(t testing.TB, cfg kv.Config) kv.Store {
	t.Helper()
	if cfg.Protocol == "" {
		cfg.Protocol = "plain"
	}
	cfg.Backend, cfg.Keys = mem.New(), kvtest.NewKeys(t)
	store, err := kv.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

type testEnv struct {
	srv   *Server
	store kv.Store
	addr  string
	logs  *syncbuf.Buffer
}

// startServer serves store on a loopback port until the test ends, then
// shuts the server down and closes the store.
func startServer(t testing.TB, store kv.Store, opts Options) *testEnv {
	t.Helper()
	logs := &syncbuf.Buffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := NewServer(store, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		store.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", logs)
		}
	})
	return &testEnv{srv: srv, store: store, addr: ln.Addr().String(), logs: logs}
}

func (e *testEnv) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *testEnv) dial(t testing.TB) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// exchange writes send and reads exactly len(want) bytes of reply.
func exchange(t *testing.T, nc net.Conn, send, want string) {
	t.Helper()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(nc, send); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	n, err := io.ReadFull(nc, got)
	if err != nil || string(got) != want {
		t.Fatalf("sent %q: got %q (%v), want %q", send, got[:n], err, want)
	}
}

// expectClose reads everything up to the server's close and compares it
// with want.
func expectClose(t *testing.T, nc net.Conn, want string) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(nc)
	if err != nil {
		t.Fatalf("got %q then %v, want %q then the server closing", got, err, want)
	}
	if string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// errText is an error's text, or "<nil>".
func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func mustContain(t *testing.T, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("missing %q in:\n%s", p, s)
		}
	}
}
