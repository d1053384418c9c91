package redis_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/backendtest"
	"github.com/oblivkv/oblivkv/backend/redis"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// opened remembers the URL of a test backend, so it can be reopened.
type opened struct {
	*redis.Backend
	url string
}

func TestConformance(t *testing.T) {
	open := func(t *testing.T) backend.Backend { return openURL(t, redistest.Shared(t)) }
	reopen := func(t *testing.T, old backend.Backend) backend.Backend {
		return openURL(t, old.(opened).url)
	}
	backendtest.Run(t, open, backendtest.WithReopen(reopen))
}

func openURL(t *testing.T, url string) backend.Backend {
	t.Helper()
	b, err := redis.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return opened{b, url}
}

func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := redis.Open(ctx, "redis://"+addr+"/0")
	if err == nil {
		b.Close()
		t.Fatal("Open of an address where nothing listens succeeded")
	}
	if !strings.Contains(err.Error(), "cannot reach "+addr) {
		t.Fatalf("unclear error: %v", err)
	}
}

func TestOpenBadURL(t *testing.T) {
	if _, err := redis.Open(context.Background(), "http://localhost:6379"); err == nil || !strings.Contains(err.Error(), "bad URL") {
		t.Fatalf("Open of a non-redis URL = %v, want a bad URL error", err)
	}
}

// TestDatabasesAreSeparate checks that the /DB part of the URL is honoured.
func TestDatabasesAreSeparate(t *testing.T) {
	a, b := openURL(t, redistest.Shared(t)), openURL(t, redistest.Shared(t))
	ctx := context.Background()
	if err := a.Write(ctx, []backend.Item{{Addr: "k", Value: []byte("in a")}}); err != nil {
		t.Fatal(err)
	}
	vals, err := b.Read(ctx, []string{"k"})
	if err != nil || vals[0] != nil {
		t.Fatalf("database b sees a's key: %q, %v", vals, err)
	}
}
