// Package redistest starts throwaway redis-server processes for tests.
//
// It owns those processes: each listens only on 127.0.0.1, on a free port,
// with persistence off (--save "" --appendonly no) and its files in a
// temporary directory, and it is killed and reaped when the test (Start) or
// the test binary (Shared + Main/StopShared) is done. On Linux the server
// also gets SIGKILL if the test process dies first, so no server outlives
// its tests.
//
// It must never touch a Redis it did not start, and never skip silently:
// if redis-server is not installed the test fails and says to install
// Debian's redis-server package. Setting OBLIVKV_SKIP_REDIS=1 turns that
// failure into an explicit t.Skip, for machines that cannot have Redis.
// Require applies the same rule to tests that run redis-cli or
// redis-benchmark.
//
// Fresh data per test: Start gives each test its own server. Shared gives
// many tests one server (started once per test binary with SharedDatabases
// logical databases) and leases each test its own database number, flushed
// when leased and returned when the test ends. Distinct databases, rather
// than FLUSHALL between tests, let parallel tests share the server safely.
//
// StartTLS starts a server for one test that accepts only TLS connections
// with a client certificate and requires a password, with certificates
// made for it by package testcerts: for tests of the rediss:// backend.
//
// It speaks the few RESP commands it needs (PING, SELECT, FLUSHDB) itself,
// so it depends on nothing but the standard library.
package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/internal/testsupport/testcerts"
)

// SkipEnv is the environment variable that, set to "1", makes tests skip
// (rather than fail) when redis-server is not installed.
const SkipEnv = "OBLIVKV_SKIP_REDIS"

const (
	startAttempts = 5                // ports tried before giving up
	startTimeout  = 10 * time.Second // per attempt, until PING answers
)

// server is one running redis-server.
type server struct {
	endpoint
	cmd    *exec.Cmd     // the redis-server process
	exited chan struct{} // closed when the process has been reaped
	dir    string        // its working directory and log file
}

// options are how a server is started.
type options struct {
	databases int
	certs     *testcerts.Set // if set: TLS only, with client certificates
	password  string         // if set: requirepass
}

// args are redis-server's arguments for a server on port.
func (o options) args(port int, dir, logFile string) []string {
	args := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
		"--databases", strconv.Itoa(o.databases), "--logfile", logFile}
	if o.password != "" {
		args = append(args, "--requirepass", o.password)
	}
	if o.certs == nil {
		return append(args, "--port", strconv.Itoa(port))
	}
	return append(args, "--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", o.certs.ServerCert, "--tls-key-file", o.certs.ServerKey,
		"--tls-ca-cert-file", o.certs.CA, "--tls-auth-clients", "yes")
}

// Start starts a redis-server for this test only and returns its URL,
// "redis://127.0.0.1:PORT/0". The server is stopped when the test ends.
func Start(t testing.TB) (url string) {
	t.Helper()
	Require(t, "redis-server")
	s, err := start(t.TempDir(), options{databases: 16})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.stop)
	return s.url(0)
}

// Require returns the path of the Redis program name (redis-server,
// redis-cli, redis-benchmark: Debian's redis-server package brings them
// all). When it is not on PATH the test fails, or, with
// OBLIVKV_SKIP_REDIS=1, skips.
func Require(t testing.TB, name string) (path string) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv(SkipEnv) == "1" {
		t.Skipf("%s not installed and %s=1: skipping Redis tests", name, SkipEnv)
	}
	t.Fatalf("%s not found on PATH: install Debian's redis-server package "+
		"(sudo apt-get install redis-server), or set %s=1 to skip Redis tests", name, SkipEnv)
	return ""
}

func (s *server) url(db int) string { return fmt.Sprintf("redis://%s/%d", s.addr, db) }

// start launches redis-server in dir on a free loopback port, retrying on a
// port collision, and waits until it answers PING.
func start(dir string, o options) (*server, error) {
	var err error
	for range startAttempts {
		var s *server
		if s, err = startOnce(dir, o); err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortInUse) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no free port after %d attempts: %w", startAttempts, err)
}

var errPortInUse = errors.New("port already in use")

func startOnce(dir string, o options) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logFile := filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))
	cmd := exec.Command("redis-server", o.args(port, dir, logFile)...)
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	at := endpoint{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), password: o.password}
	if o.certs != nil {
		at.tls = o.certs.ClientConfig(true)
	}
	s := &server{endpoint: at, cmd: cmd, exited: make(chan struct{}), dir: dir}
	go func() { cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(logFile); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before redis-server binds it; start retries in that case.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls PING until the server answers, exits, or times out.
func (s *server) waitReady(logFile string) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if err := s.do([]string{"PING"}); err == nil {
			return nil
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(logFile)
			if strings.Contains(string(log), "Address already in use") {
				return errPortInUse
			}
			return fmt.Errorf("redis-server exited during startup (%v); its log:\n%s", s.cmd.ProcessState, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %v", s.addr, startTimeout)
		}
	}
}

// stop kills the server and waits until it has been reaped.
func (s *server) stop() {
	s.cmd.Process.Kill()
	<-s.exited
}

// endpoint is how to reach a server: its address, and the client's TLS
// configuration and the password when the server has them.
type endpoint struct {
	addr     string // 127.0.0.1:port
	tls      *tls.Config
	password string
}

func (e endpoint) dial() (net.Conn, error) {
	d := &net.Dialer{Timeout: time.Second}
	if e.tls != nil {
		return tls.DialWithDialer(d, "tcp", e.addr, e.tls)
	}
	return d.Dial("tcp", e.addr)
}

// do sends cmds as one pipeline and checks that each gets a simple success
// reply (+OK, +PONG).
func (e endpoint) do(cmds ...[]string) error {
	replies, err := e.send(cmds...)
	if err != nil {
		return err
	}
	for i, r := range replies {
		if !strings.HasPrefix(r, "+") {
			return fmt.Errorf("redis %s: %s", cmds[i][0], r)
		}
	}
	return nil
}

// send sends cmds as one pipeline on a new connection, after an AUTH when
// the server has a password, and returns the first line of each reply. It
// is meant for replies that are one line long.
func (e endpoint) send(cmds ...[]string) ([]string, error) {
	if e.password != "" {
		cmds = append([][]string{{"AUTH", e.password}}, cmds...)
	}
	conn, err := e.dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var req strings.Builder
	for _, args := range cmds {
		fmt.Fprintf(&req, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := conn.Write([]byte(req.String())); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	replies := make([]string, len(cmds))
	for i := range cmds {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		replies[i] = strings.TrimRight(line, "\r\n")
	}
	if e.password != "" {
		if replies[0] != "+OK" {
			return nil, fmt.Errorf("redis AUTH: %s", replies[0])
		}
		replies = replies[1:]
	}
	return replies, nil
}
