package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/testsupport/syncbuf"
	"github.com/oblivkv/oblivkv/kv"
)

// TestMain lets the test binary stand in for the oblivkv binary: with
// OBLIVKV_RUN_MAIN=1 it runs main() with the arguments in OBLIVKV_ARGS,
// so tests can run the real command as a process and send it signals.
// It unsets OBLIVKV_ARGS, so that the children a command starts as this
// binary (cluster up's) run main() with their command lines.
func TestMain(m *testing.M) {
	if os.Getenv("OBLIVKV_RUN_MAIN") == "1" {
		args := os.Args[1:]
		if env, ok := os.LookupEnv("OBLIVKV_ARGS"); ok {
			args = strings.Fields(env)
			os.Unsetenv("OBLIVKV_ARGS")
		}
		os.Args = append([]string{"oblivkv"}, args...)
		killRekeyAtStep()
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// mainCmd is the test binary run as `oblivkv args...` in dir (see
// TestMain).
func mainCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "OBLIVKV_RUN_MAIN=1", "OBLIVKV_ARGS="+strings.Join(args, " "))
	cmd.Dir = dir
	return cmd
}

// runMain runs `oblivkv args...` in dir and returns its output.
func runMain(dir string, args ...string) (string, error) {
	out, err := mainCmd(dir, args...).CombinedOutput()
	return string(out), err
}

// server is an `oblivkv serve` process.
type server struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncbuf.Buffer
}

func startServe(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	return startServeAt(t, dir, freeAddr(t), args...)
}

// startServeAt starts serve on addr with its data dir in dir, and waits
// until it listens.
func startServeAt(t *testing.T, dir, addr string, args ...string) *server {
	t.Helper()
	all := append([]string{"serve", "--listen", addr, "--data-dir", filepath.Join(dir, "data")}, args...)
	s := &server{addr: addr, stderr: &syncbuf.Buffer{}}
	s.cmd = mainCmd(dir, all...)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("oblivkv serve did not listen on %s: %s", addr, s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and requires a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("oblivkv serve exited with %v after SIGTERM: %s", err, s.stderr)
	}
	if !strings.Contains(s.stderr.String(), "shut down cleanly") {
		t.Fatalf("no clean shutdown logged: %s", s.stderr)
	}
}

// distinctAddrs hands out free loopback addresses, each at most once:
// freeAddr closes the port it found, so it may find the same one again,
// and two processes of one configuration must not share one.
type distinctAddrs struct {
	t     *testing.T
	given map[string]bool
}

func newDistinctAddrs(t *testing.T) *distinctAddrs {
	return &distinctAddrs{t: t, given: map[string]bool{}}
}

// next returns a free address not handed out before.
func (d *distinctAddrs) next() string {
	for {
		if a := freeAddr(d.t); !d.given[a] {
			d.given[a] = true
			return a
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func client(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	return c
}

// smallStore is the only flag the tests give a new store of the default
// protocol: treebeard writes its trees at the first access, and at the
// default capacity that takes seconds (longer under -race than a client's
// read timeout).
var smallStore = []string{"--capacity", "1024"}

// TestServeRestartKeepsData runs the real command: data written before a
// SIGTERM is served again after a restart on the same data dir, and the
// key file is created with mode 0600. The store is of the default protocol,
// and the restart gives no store flags, so it reuses the stored ones.
func TestServeRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := startServe(t, dir, smallStore...)
	c := client(t, s.addr)
	if err := c.MSet(ctx, "a", "1", "b", "2", "gone", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Del(ctx, "gone").Result(); err != nil || n != 1 {
		t.Fatalf("DEL gone = %d, %v; want 1", n, err)
	}
	s.stop(t)
	info, err := os.Stat(filepath.Join(dir, "data", "key"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, info.Mode().Perm())
	}

	s = startServe(t, dir)
	c = client(t, s.addr)
	got, err := c.MGet(ctx, "a", "b", "gone").Result()
	if err != nil || got[0] != "1" || got[1] != "2" || got[2] != nil {
		t.Fatalf("after restart MGET a b gone = %v, %v; want [1 2 <nil>]", got, err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 2 {
		t.Fatalf("after restart DBSIZE = %d, %v; want 2", n, err)
	}
	oblivkv, err := c.Info(ctx, "oblivkv").Result()
	if err != nil || !strings.Contains(oblivkv, "protocol:"+setup.DefaultProtocol+"\r\n") ||
		!strings.Contains(oblivkv, "capacity:1024\r\n") {
		t.Fatalf("after restart INFO oblivkv = %q, %v; want protocol %s, capacity 1024", oblivkv, err, setup.DefaultProtocol)
	}
	s.stop(t)
}

// TestServeProtocolOptions: --opt settings reach the protocol (its INFO
// counters show them) and are stored with the store: a restart given the
// same ones, or none, serves the data with them, `info` shows them, and a
// restart with another value is refused naming both values, leaving the
// journal and the data as they were. An unknown option is a startup error.
func TestServeProtocolOptions(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	opts := []string{"--opt", "trees=2", "--opt", "Epoch=200us"}
	s := startServe(t, dir, append([]string{"--protocol", "treebeard", "--capacity", "256"}, opts...)...)
	c := client(t, s.addr)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx, "oblivkv").Result(); err != nil || !strings.Contains(info, "trees:2\r\n") ||
		!strings.Contains(info, "\r\noptions:Epoch=200µs Trees=2\r\n") {
		t.Fatalf("INFO oblivkv = %q, %v; want trees:2 and the options", info, err)
	}
	s.stop(t)
	if !strings.Contains(s.stderr.String(), `options="Epoch=200µs Trees=2"`) {
		t.Errorf("options not logged: %s", s.stderr)
	}

	fingerprint := kv.OptionsFingerprint("treebeard", map[string]string{"Trees": "2", "Epoch": "200µs"})
	// servesWithTrees2 restarts with args and requires the data, trees=2
	// and the options' fingerprint to be served.
	servesWithTrees2 := func(args ...string) {
		t.Helper()
		s := startServe(t, dir, args...)
		c := client(t, s.addr)
		if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("restart with %q: GET k = %q, %v; want v", args, got, err)
		}
		if info, err := c.Info(ctx, "oblivkv").Result(); err != nil || !strings.Contains(info, "trees:2\r\n") {
			t.Fatalf("restart with %q: INFO oblivkv = %q, %v; want trees:2", args, info, err)
		}
		if info, err := c.Info(ctx, "oblivkv").Result(); err != nil || !strings.Contains(info, "options_fingerprint:"+fingerprint+"\r\n") {
			t.Errorf("restart with %q: INFO oblivkv = %q, %v; want options_fingerprint:%s", args, info, err, fingerprint)
		}
		s.stop(t)
	}
	servesWithTrees2(opts...)
	servesWithTrees2() // no --opt: the stored ones

	out, err := runMain(dir, "info", "--data-dir", filepath.Join(dir, "data"))
	for _, want := range []string{"protocol:      treebeard\n", "capacity:      256\n", "value_size:    1024\n",
		"max_key_size:  256\n", "options:       Epoch=200µs Trees=2\n", "fingerprint:   " + fingerprint + "\n", "store_bytes:   "} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("info: %v; output %q lacks %q", err, out, want)
		}
	}

	// The store's own files are not compared: pebble rotates its log and
	// manifest at every open, writing nothing of oblivkv's. What it holds
	// is, and the data and the options are served after the refusals.
	before := snapshot(t, filepath.Join(dir, "data"), "journal", "key")
	stored := storeContents(t, filepath.Join(dir, "data"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--opt", "trees=8"}, "option Trees is 2 in the store, the default (8) given"},
		{[]string{"--opt", "trees=3"}, "option Trees is 2 in the store, 3 given"},
		{[]string{"--opt", "trees=2", "--opt", "epoch=1ms"}, "option Epoch is 200µs in the store, the default (1ms) given"},
		{[]string{"--opt", "routers=2"}, "option Routers is the default (1) in the store, 2 given"},
	} {
		if out := serveFails(t, dir, tc.args...); !strings.Contains(out, tc.want) ||
			!strings.Contains(out, "stored data was created with another configuration") {
			t.Errorf("restart with %q: got %q; want %q", tc.args, out, tc.want)
		}
	}
	if after := snapshot(t, filepath.Join(dir, "data"), "journal", "key"); !maps.Equal(before, after) {
		t.Error("a refused restart changed the key file or the journal")
	}
	if after := storeContents(t, filepath.Join(dir, "data")); !maps.Equal(stored, after) {
		t.Error("a refused restart changed what the store holds")
	}
	servesWithTrees2()

	if out := serveFails(t, t.TempDir(), "--opt", "bogus=1"); !strings.Contains(out, `no option "bogus"`) ||
		!strings.Contains(out, "Trees") {
		t.Errorf("unknown option: got %q", out)
	}
	if out := serveFails(t, t.TempDir(), "--protocol", "encrypted", "--opt", "trees=2"); !strings.Contains(out, "takes no options") {
		t.Errorf("option of a protocol without options: got %q", out)
	}
}

// storeContents returns every address the disk store of dataDir holds,
// with its (sealed) value, reading it without writing.
func storeContents(t *testing.T, dataDir string) map[string]string {
	t.Helper()
	b, err := setup.OpenDiskStore(filepath.Join(dataDir, "store"), true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var addrs []string
	if err := b.Scan(t.Context(), "", func(a string) error { addrs = append(addrs, a); return nil }); err != nil {
		t.Fatal(err)
	}
	vals, err := b.Read(t.Context(), addrs)
	if err != nil {
		t.Fatal(err)
	}
	contents := make(map[string]string, len(addrs))
	for i, a := range addrs {
		contents[a] = string(vals[i])
	}
	if len(contents) == 0 {
		t.Fatalf("no store in %s", dataDir)
	}
	return contents
}

// snapshot returns the contents of the files under dir/sub for each sub,
// by path.
func snapshot(t *testing.T, dir string, subs ...string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, sub := range subs {
		err := filepath.WalkDir(filepath.Join(dir, sub), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			files[path] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// TestServeRefusesWrongOrMissingKey: an existing data dir with a missing
// or foreign key file is a startup error, never a new empty store.
func TestServeRefusesWrongOrMissingKey(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, dir, smallStore...)
	if err := client(t, s.addr).Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.stop(t)
	keyFile := filepath.Join(dir, "data", "key")
	original, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if out := serveFails(t, dir); !strings.Contains(out, "key file") || !strings.Contains(out, "missing") {
		t.Fatalf("missing key file: got %q", out)
	}
	if _, err := os.Stat(keyFile); err == nil {
		t.Fatal("a new key file was created for a data dir that holds a store")
	}
	foreign := bytes.Replace(original, original[len(original)-9:len(original)-1], []byte("00000000"), 1)
	if err := os.WriteFile(keyFile, foreign, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := serveFails(t, dir); !strings.Contains(out, "does not open this store") {
		t.Fatalf("wrong key file: got %q", out)
	}
}

// serveFails runs serve with args and requires it to exit non-zero; it
// returns the output.
func serveFails(t *testing.T, dir string, args ...string) string {
	t.Helper()
	all := append([]string{"serve", "--listen", freeAddr(t), "--data-dir", filepath.Join(dir, "data")}, args...)
	cmd := mainCmd(dir, all...)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A serve that started would not exit: stop it.
	stop := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	if !stop.Stop() || err == nil {
		t.Fatalf("serve %v started: %s", args, out)
	}
	return out.String()
}

// TestServeChecksBeforeCreating: an unknown protocol and a listen address
// in use are refused before anything is written (no data dir appears),
// and SIGINT while a new store writes its tree stops the server cleanly,
// the next start building the store afresh.
func TestServeChecksBeforeCreating(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if out := serveFails(t, dir, "--protocol", "nope"); !strings.Contains(out, `unknown protocol "nope"`) {
		t.Errorf("unknown protocol: got %q", out)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	out, err := runMain(dir, "serve", "--listen", busy.Addr().String(), "--data-dir", data)
	if err == nil || !strings.Contains(out, "address already in use") {
		t.Errorf("listen address in use: %v, %q", err, out)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a refused start left a data dir: %v", err)
	}

	// A tree of 2^20 leaves takes seconds to write: interrupt it.
	cmd := mainCmd(dir, "serve", "--listen", freeAddr(t), "--data-dir", data, "--protocol", "pathoram", "--capacity", "1048576")
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for size := int64(0); size < 1<<20; size = setup.DirSize(filepath.Join(data, "store")) {
		if time.Now().After(deadline) {
			t.Fatalf("the new store wrote %d bytes in 20 s: %s", size, stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(stderr.String(), "interrupted while opening the store") {
		t.Fatalf("SIGINT during creation: %v; %s", err, stderr)
	}
	s := startServe(t, dir, "--protocol", "pathoram", "--capacity", "256")
	c := client(t, s.addr)
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("the store created after an interrupted one: %v", err)
	}
	s.stop(t)
}

// TestServeCPUProfile: --cpuprofile writes a profile (gzipped protobuf,
// as go tool pprof reads it) once the server shuts down.
func TestServeCPUProfile(t *testing.T) {
	dir := t.TempDir()
	profile := filepath.Join(dir, "cpu.prof")
	s := startServe(t, dir, append(smallStore, "--cpuprofile", profile)...)
	if err := client(t, s.addr).Set(context.Background(), "a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.stop(t)
	f, err := os.Open(profile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("the CPU profile is not gzipped: %v", err)
	}
	if data, err := io.ReadAll(z); err != nil || len(data) == 0 {
		t.Fatalf("the CPU profile holds %d bytes: %v", len(data), err)
	}
}
