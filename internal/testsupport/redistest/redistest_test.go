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
		if err := (endpoint{addr: addr}).do([]string{"PING"}); err != nil {
			t.Fatalf("PING: %v", err)
		}
	})
	if err := (endpoint{addr: addr}).do([]string{"PING"}); err == nil {
		t.Fatalf("server on %s still answers after its test ended", addr)
	}
}

func TestSharedLeasesFreshDistinctDatabases(t *testing.T) {
	first := Shared(t) // starts the server
	addr := hostOf(t, first)
	for db := range SharedDatabases {
		dirty := []string{"SELECT", strconv.Itoa(db)}
		if err := (endpoint{addr: addr}).do(dirty, []string{"SET", "leftover", "x"}); err != nil {
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
		got, err := (endpoint{addr: addr}).send([]string{"SELECT", db}, []string{"EXISTS", "leftover"})
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

// TestStartTLS checks the TLS server: it answers over TLS with the client
// certificate and the password, and refuses plain TCP, a client without a
// certificate and a client without the password.
func TestStartTLS(t *testing.T) {
	s := StartTLS(t)
	with := endpoint{addr: s.Addr, tls: s.Certs.ClientConfig(true), password: s.Password}
	if err := with.do([]string{"PING"}); err != nil {
		t.Fatalf("PING over TLS with a certificate and the password: %v", err)
	}
	for name, e := range map[string]endpoint{
		"plain TCP":      {addr: s.Addr, password: s.Password},
		"no certificate": {addr: s.Addr, tls: s.Certs.ClientConfig(false), password: s.Password},
		"no password":    {addr: s.Addr, tls: s.Certs.ClientConfig(true)},
		"wrong password": {addr: s.Addr, tls: s.Certs.ClientConfig(true), password: "x"},
	} {
		if err := e.do([]string{"PING"}); err == nil {
			t.Errorf("%s: PING answered", name)
		}
	}
	u, err := url.Parse(s.URL(3, true))
	if err != nil || u.Scheme != "rediss" || u.Host != s.Addr || u.Path != "/3" ||
		u.Query().Get("tls_cert") != s.Certs.ClientCert {
		t.Fatalf("URL %s: %v", u, err)
	}
}
