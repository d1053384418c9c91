package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/auth"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/internal/testsupport/testcerts"
)

// passwdLines runs `oblivkv passwd` for each user, the password on stdin,
// and returns the users file it printed.
func passwdLines(t *testing.T, users ...[3]string) string {
	t.Helper()
	var file bytes.Buffer
	for _, u := range users { // name, password, "ro" for read-only
		args := []string{"passwd", u[0]}
		if u[2] == "ro" {
			args = append(args, "--read-only")
		}
		root := newRootCmd()
		root.SetArgs(args)
		root.SetIn(strings.NewReader(u[1] + "\n"))
		root.SetOut(&file)
		if err := root.Execute(); err != nil {
			t.Fatalf("passwd %s: %v", u[0], err)
		}
	}
	if strings.Contains(file.String(), "wonderland") {
		t.Fatalf("passwd printed the password:\n%s", file.String())
	}
	return file.String()
}

func writeTestFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func clientWith(t *testing.T, addr string, o goredis.Options) *goredis.Client {
	o.Addr, o.Protocol, o.MaxRetries = addr, 2, -1
	c := goredis.NewClient(&o)
	t.Cleanup(func() { c.Close() })
	return c
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestServeUsers runs the real serve with a users file made by `oblivkv
// passwd` and the default user's password in $OBLIVKV_PASSWORD: no
// password, a wrong one and a read-only user writing are refused, and
// the failures are logged without the password.
func TestServeUsers(t *testing.T) {
	dir := t.TempDir()
	users := writeTestFile(t, dir, "users", "# test users\n"+
		passwdLines(t, [3]string{"alice", "wonderland", ""}, [3]string{"reports", "numbers", "ro"}))
	t.Setenv(passwordEnv, "t0p")
	s := startServe(t, dir, append(smallStore, "--users", users)...)
	ctx := context.Background()

	if err := client(t, s.addr).Set(ctx, "k", "v", 0).Err(); errString(err) != "NOAUTH Authentication required." {
		t.Errorf("no password: %v", err)
	}
	wrong := clientWith(t, s.addr, goredis.Options{Username: "alice", Password: "hunter2"})
	if err := wrong.Get(ctx, "k").Err(); !strings.Contains(errString(err), "WRONGPASS") {
		t.Errorf("wrong password: %v", err)
	}
	if err := clientWith(t, s.addr, goredis.Options{Password: "t0p"}).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Errorf("default user with $%s: %v", passwordEnv, err)
	}
	alice := clientWith(t, s.addr, goredis.Options{Username: "alice", Password: "wonderland"})
	if err := alice.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Errorf("alice SET: %v", err)
	}
	reports := clientWith(t, s.addr, goredis.Options{Username: "reports", Password: "numbers"})
	if v, err := reports.Get(ctx, "a").Result(); err != nil || v != "1" {
		t.Errorf("read-only GET: %q, %v", v, err)
	}
	want := "NOPERM User reports has no permissions to run the 'set' command"
	if err := reports.Set(ctx, "a", "2", 0).Err(); errString(err) != want {
		t.Errorf("read-only SET: %v, want %q", err, want)
	}
	if v, _ := alice.Get(ctx, "a").Result(); v != "1" {
		t.Errorf("a = %q after the read-only SET, want 1", v)
	}
	s.stop(t)
	logs := s.stderr.String()
	if !strings.Contains(logs, "authentication failed") || !strings.Contains(logs, "user=alice") {
		t.Errorf("the failed attempt is not logged:\n%s", logs)
	}
	if strings.Contains(logs, "hunter2") || strings.Contains(logs, "t0p") || strings.Contains(logs, "wonderland") {
		t.Errorf("a password is in the log:\n%s", logs)
	}
	if !strings.Contains(logs, "users=alice,default,reports") {
		t.Errorf("the start log does not list the users:\n%s", logs)
	}
}

// TestServeProtectedMode checks that a server anyone could use is refused
// on a non-loopback address, before anything is written, with a message
// naming every way out.
func TestServeProtectedMode(t *testing.T) {
	dir := t.TempDir()
	out := serveFails(t, dir, "--listen", "0.0.0.0:0")
	for _, want := range []string{"protected mode", "--requirepass", passwordEnv, "--users FILE",
		"--tls-ca", "--listen 127.0.0.1:PORT", "--protected-mode=false"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not mention %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Fatalf("a refused start left a data dir: %v", err)
	}
}

// TestProtectedModeDecision is the rule behind TestServeProtectedMode for
// each way out.
func TestProtectedModeDecision(t *testing.T) {
	users := auth.NewUsers()
	open := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 6380} }
	for _, c := range []struct {
		addr    net.Addr
		flags   securityFlags
		users   *auth.Users
		refused bool
	}{
		{open("0.0.0.0"), securityFlags{protectedMode: true}, nil, true},
		{open("::"), securityFlags{protectedMode: true}, nil, true},
		{open("10.1.2.3"), securityFlags{protectedMode: true}, nil, true},
		{open("127.0.0.1"), securityFlags{protectedMode: true}, nil, false},
		{open("::1"), securityFlags{protectedMode: true}, nil, false},
		{open("0.0.0.0"), securityFlags{protectedMode: true}, users, false},
		{open("0.0.0.0"), securityFlags{protectedMode: true, tlsCA: "ca.pem"}, nil, false},
		{open("0.0.0.0"), securityFlags{protectedMode: true, tlsCert: "c.pem", tlsKey: "k.pem"}, nil, true},
		{open("0.0.0.0"), securityFlags{}, nil, false},
	} {
		err := c.flags.checkProtected(c.addr, c.users)
		if (err != nil) != c.refused {
			t.Errorf("%v with %+v, users %v: %v, want refused=%v", c.addr, c.flags, c.users != nil, err, c.refused)
		}
	}
}

// TestServeRefusesBadSecurityFlags: flags that cannot work are refused
// before a store is written.
func TestServeRefusesBadSecurityFlags(t *testing.T) {
	dir := t.TempDir()
	certs := testcerts.New(t)
	notUsers := writeTestFile(t, dir, "users", "alice read-write not-a-hash\n")
	twice := writeTestFile(t, dir, "twice", passwdLines(t, [3]string{"default", "x", ""}))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certs.ServerCert}, "both --tls-cert and --tls-key"},
		{[]string{"--tls-cert", certs.ServerCert, "--tls-key", certs.ClientKey}, "private key does not match"},
		{[]string{"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-ca", notUsers}, "no PEM certificate"},
		{[]string{"--users", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"--users", notUsers}, "line 1: user \"alice\": password hash"},
		{[]string{"--users", twice, "--requirepass", "y"}, "defined twice"},
	} {
		if out := serveFails(t, dir, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("%v: got %q, want %q", c.args, out, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Fatalf("a refused start left a data dir: %v", err)
	}
}

// TestServeTLSClientCert serves over TLS requiring client certificates:
// a Go client and redis-cli --tls with the client certificate are served,
// without it (or without TLS) the handshake fails.
func TestServeTLSClientCert(t *testing.T) {
	dir := t.TempDir()
	certs := testcerts.New(t)
	s := startServe(t, dir, append(smallStore, "--tls-cert", certs.ServerCert,
		"--tls-key", certs.ServerKey, "--tls-ca", certs.CA)...)
	ctx := context.Background()
	withCert := clientWith(t, s.addr, goredis.Options{TLSConfig: certs.ClientConfig(true)})
	if err := withCert.Set(ctx, "k", "over tls", 0).Err(); err != nil {
		t.Fatalf("TLS with a client certificate: %v", err)
	}
	noCert := clientWith(t, s.addr, goredis.Options{TLSConfig: certs.ClientConfig(false)})
	if err := noCert.Get(ctx, "k").Err(); !strings.Contains(errString(err), "certificate required") {
		t.Errorf("TLS without a client certificate: %v, want the handshake refused", err)
	}
	if err := client(t, s.addr).Get(ctx, "k").Err(); err == nil {
		t.Error("a client without TLS was served")
	}
	tlsArgs := []string{"--tls", "--cacert", certs.CA, "-h", "127.0.0.1", "-p", port(t, s.addr)}
	if out := redisCLI(t, append(tlsArgs, "--cert", certs.ClientCert, "--key", certs.ClientKey, "GET", "k")...); out != "over tls" {
		t.Errorf("redis-cli --tls with a client certificate: GET k = %q", out)
	}
	if out := redisCLI(t, append(tlsArgs, "GET", "k")...); strings.Contains(out, "over tls") {
		t.Errorf("redis-cli --tls without a client certificate was served: %q", out)
	}
	s.stop(t)
}

// TestServeTLSWithPassword serves over TLS without client certificates,
// with a password: the handshake succeeds without a certificate, and
// AUTH decides.
func TestServeTLSWithPassword(t *testing.T) {
	dir := t.TempDir()
	certs := testcerts.New(t)
	s := startServe(t, dir, append(smallStore, "--tls-cert", certs.ServerCert,
		"--tls-key", certs.ServerKey, "--requirepass", "t0p")...)
	ctx := context.Background()
	c := clientWith(t, s.addr, goredis.Options{TLSConfig: certs.ClientConfig(false), Password: "t0p"})
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("TLS without a client certificate, with the password: %v", err)
	}
	noPass := clientWith(t, s.addr, goredis.Options{TLSConfig: certs.ClientConfig(false)})
	if err := noPass.Get(ctx, "k").Err(); errString(err) != "NOAUTH Authentication required." {
		t.Errorf("TLS without the password: %v", err)
	}
	args := []string{"--tls", "--cacert", certs.CA, "-h", "127.0.0.1", "-p", port(t, s.addr), "--no-auth-warning"}
	if out := redisCLI(t, append(args, "-a", "t0p", "GET", "k")...); out != "v" {
		t.Errorf("redis-cli --tls -a: GET k = %q", out)
	}
	s.stop(t)
}

func port(t *testing.T, addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// redisCLI runs redis-cli and returns its trimmed output, errors included.
func redisCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, _ := exec.Command(redistest.Require(t, "redis-cli"), args...).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// TestServeRedisBackendOverTLS serves a store kept on a redis-server that
// accepts only TLS with a client certificate and a password, through a
// rediss:// URL; the log names the backend without the URL.
func TestServeRedisBackendOverTLS(t *testing.T) {
	dir := t.TempDir()
	backend := redistest.StartTLS(t)
	s := startServe(t, dir, append(smallStore, "--backend", backend.URL(2, true))...)
	c := client(t, s.addr)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "kept on rediss", 0).Err(); err != nil {
		t.Fatalf("SET over a TLS backend: %v", err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "kept on rediss" {
		t.Fatalf("GET over a TLS backend: %q, %v", v, err)
	}
	info, err := c.Info(ctx, "oblivkv").Result()
	if err != nil || !strings.Contains(info, "\r\nbackend:rediss\r\n") {
		t.Errorf("INFO oblivkv does not name the rediss backend (%v):\n%s", err, info)
	}
	s.stop(t)
	if logs := s.stderr.String(); !strings.Contains(logs, "backend=rediss ") || strings.Contains(logs, backend.Password) {
		t.Errorf("the start log should name the backend rediss, without its password:\n%s", logs)
	}
}
