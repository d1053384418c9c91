package redistest

import (
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "redis" {
		t.Fatalf("bad URL %q: %v", u, err)
	}
	return p.Host
}

func TestStartAndStop(t *testing.T) {
	var addr string
	t.Run("running", func(t *testing.T) {
		addr = hostOf(t, Start(t))
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("server listens on %s, want loopback", addr)
		}
		if err := do(addr, []string{"PING"}); err != nil {
			t.Fatalf("PING: %v", err)
		}
	})
	if err := do(addr, []string{"PING"}); err == nil {
		t.Fatalf("server on %s still answers after its test ended", addr)
	}
}

func TestSharedLeasesFreshDistinctDatabases(t *testing.T) {
	first := Shared(t) // starts the server
	addr := hostOf(t, first)
	for db := range SharedDatabases {
		dirty := []string{"SELECT", strconv.Itoa(db)}
		if err := do(addr, dirty, []string{"SET", "leftover", "x"}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{first: true}
	for range 3 {
		u := Shared(t) // all leases held by t at once
		if hostOf(t, u) != addr || seen[u] {
			t.Fatalf("lease %s: not a new database on the shared server %s (have %v)", u, addr, seen)
		}
		seen[u] = true
		db := u[strings.LastIndex(u, "/")+1:]
		got, err := send(addr, []string{"SELECT", db}, []string{"EXISTS", "leftover"})
		if err != nil || got[1] != ":0" {
			t.Fatalf("leased database %s is not empty: %q, %v", db, got, err)
		}
	}
}

// fakeTB records how a helper ended the test.
type fakeTB struct {
	testing.TB
	ended string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.ended = "fail: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.ended = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runFake(fn func(testing.TB)) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	return f.ended
}

func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(SkipEnv, "")
	got := runFake(func(tb testing.TB) { Start(tb) })
	if !strings.HasPrefix(got, "fail: ") || !strings.Contains(got, "install Debian's redis-server") {
		t.Fatalf("without redis-server, Start ended the test with %q; want a failure saying how to install it", got)
	}
}

func TestMissingBinarySkipsWhenAsked(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(SkipEnv, "1")
	if got := runFake(func(tb testing.TB) { Shared(tb) }); !strings.HasPrefix(got, "skip: ") {
		t.Fatalf("with %s=1, Shared ended the test with %q; want a skip", SkipEnv, got)
	}
}
