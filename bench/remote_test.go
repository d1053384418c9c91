package bench

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/resp"
)

// serveRESP serves a fresh plain store over RESP on a local port.
func serveRESP(t *testing.T) (string, kv.Store) {
	t.Helper()
	tg, err := memOpener(t)(context.Background(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	store := tg.(*storeTarget).s
	t.Cleanup(func() { store.Close() })
	return serveStore(t, store), store
}

// serveStore serves store over RESP on a local port.
func serveStore(t *testing.T, store kv.Store) string {
	t.Helper()
	srv := resp.NewServer(store, resp.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		if err := <-done; !errors.Is(err, resp.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestAgainstRESPServer(t *testing.T) {
	addr, store := serveRESP(t)
	cfg := config(t, "C", "zipfian", 300, 1000)
	cfg.Backend = "resp://" + addr
	open := func(ctx context.Context, _ string) (Target, error) {
		return DialRESP(ctx, []string{addr}, cfg.Concurrency)
	}
	res, err := Run(context.Background(), cfg, []string{"remote"}, open)
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Protocol != "plain" {
		t.Errorf("protocol %q, want the server's (plain)", r.Protocol)
	}
	if r.Ops != 1000 || r.Errors != 0 || r.Misses != 0 || !(r.OpsPerSec > 0) {
		t.Errorf("ops %d errors %d (%s) misses %d ops/s %v", r.Ops, r.Errors, r.FirstError, r.Misses, r.OpsPerSec)
	}
	if r.RoundTripsPerOp == nil || *r.RoundTripsPerOp != 1 || *r.Amplification != 1 {
		t.Errorf("backend figures from INFO: rt/op %v amplification %v", r.RoundTripsPerOp, r.Amplification)
	}
	if st := store.Stats(); st.Keys != 0 || st.Puts != 300 {
		t.Errorf("server left with %d keys after %d puts; want the load's keys deleted", st.Keys, st.Puts)
	}
}

// TestSpreadsOverServers: with several addresses (the routers of one
// store), the run's calls go to every one of them.
func TestSpreadsOverServers(t *testing.T) {
	first, store := serveRESP(t)
	second := serveStore(t, store)
	cfg := config(t, "A", "uniform", 200, 1000)
	open := func(ctx context.Context, _ string) (Target, error) {
		return DialRESP(ctx, []string{first, second}, cfg.Concurrency)
	}
	res, err := Run(context.Background(), cfg, []string{"remote"}, open)
	if err != nil || res[0].Errors != 0 || res[0].Misses != 0 {
		t.Fatalf("run over two servers: %v, %+v", err, res)
	}
	// Each server's INFO counts the commands it served.
	for _, addr := range []string{first, second} {
		if n := commandsServed(t, addr); n < 400 {
			t.Errorf("server %s served %d commands of the run's 1,000 and more, want a fair share", addr, n)
		}
	}
}

// commandsServed reads INFO's total_commands_processed of the server at
// addr.
func commandsServed(t *testing.T, addr string) int {
	t.Helper()
	c := dialRESP(addr, 1)
	defer c.Close()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no total_commands_processed in INFO of %s", addr)
	return 0
}

func TestParseInfo(t *testing.T) {
	s := ParseInfo("# Oblivkv\r\nprotocol:encrypted\r\n\r\n# Stats\r\ngets:5\r\nbackend_calls:12\r\n" +
		"backend_bytes_read:300\r\nbackend_bytes_written:40\r\nbackend_bytes:340\r\n")
	if s.Protocol != "encrypted" || s.Backend == nil {
		t.Fatalf("%+v", s)
	}
	if c := *s.Backend; c.Calls != 12 || c.BytesRead != 300 || c.BytesWritten != 40 {
		t.Errorf("counters %+v", c)
	}
	// A plain Redis reports no backend: figures unknown.
	s = ParseInfo("# Server\r\nredis_version:7.2.0\r\n# Stats\r\ntotal_commands_processed:9\r\n")
	if s.Backend != nil || s.Protocol != "" {
		t.Errorf("plain Redis INFO gave %+v", s)
	}
}
