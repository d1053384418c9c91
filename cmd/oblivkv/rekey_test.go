package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/seal"
)

// rekeyKillEnv names the step of `oblivkv rekey` (counted from 1) after
// which the process running it as the oblivkv binary (TestMain) kills
// itself with SIGKILL.
const rekeyKillEnv = "OBLIVKV_TEST_REKEY_KILL_AT"

// killRekeyAtStep installs, where rekeyKillEnv is set, the rekey step hook
// that prints each step it passes and kills the process at that step.
func killRekeyAtStep() {
	at, err := strconv.Atoi(os.Getenv(rekeyKillEnv))
	if err != nil {
		return
	}
	steps := 0
	rekeyStep = func(point string) {
		steps++
		fmt.Fprintf(os.Stderr, "rekey step %d: %s\n", steps, point)
		if steps == at {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
}

// TestRekeyCrashKills re-keys a treebeard store (capacity rekeyCapacity) on disk
// with the real command, killing it with SIGKILL after a random one of its
// steps (each storage batch written, the new key, every marker, every
// rename) rekeyKills times, each kill followed by a rekey that may itself
// be killed; a rekey that finishes starts another. While a rekey is
// unfinished, serve refuses the store and says to run rekey again. In
// the end the store serves every acknowledged write under DATA_DIR/key,
// and the old key opens nothing.
func TestRekeyCrashKills(t *testing.T) {
	rekeyCrashRun(t, "disk")
}

func rekeyCrashRun(t *testing.T, spec string) {
	goredis.SetLogger(quietLogger{})
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	srv := startServe(t, dir, "--capacity", strconv.Itoa(rekeyCapacity), "--value-size", "64", "--backend", spec)
	keys := rekeyCapacity / 2
	writeKeys(t, srv.addr, keys)
	// Killed, not stopped: the journal holds records no checkpoint covers.
	srv.cmd.Process.Kill()
	srv.cmd.Wait()
	rk := rekeyRunner{t: t, dir: dir, data: data, spec: spec}
	full, _ := rk.run(0)
	rk.removeOldKey()
	r := rand.New(rand.NewPCG(kvtest.Seed(t), kvtest.ScheduleStream))
	refused := false
	for kills := 0; kills < rekeyKills; {
		if _, killed := rk.run(1 + r.IntN(full)); !killed {
			rk.removeOldKey()
			continue
		}
		kills++
		if _, err := os.Stat(filepath.Join(data, "rekey")); err == nil && !refused {
			rk.checkServeRefuses()
			refused = true
		}
	}
	rk.run(0)
	t.Logf("a rekey takes %d steps; %d kills", full, rekeyKills)
	srv = startServeAt(t, dir, srv.addr, "--backend", spec)
	readKeys(t, srv.addr, keys)
	srv.stop(t)
	checkOldKeyOpensNothing(t, data, spec)
}

// rekeyRunner runs `oblivkv rekey` on one data dir.
type rekeyRunner struct {
	t               *testing.T
	dir, data, spec string
}

// run runs rekey to be killed after step killAt (0: never), and returns
// how many steps it passed and whether it was killed.
func (rk rekeyRunner) run(killAt int) (int, bool) {
	rk.t.Helper()
	cmd := mainCmd(rk.dir, "rekey", "--data-dir", rk.data, "--backend", rk.spec)
	cmd.Env = append(cmd.Env, rekeyKillEnv+"="+strconv.Itoa(killAt))
	out, err := cmd.CombinedOutput()
	steps := strings.Count(string(out), "rekey step ")
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
		return steps, true
	}
	// A rekey killed after its last step left nothing to do but finish.
	if err != nil || steps == 0 && !strings.Contains(string(out), "finished an unfinished rekey") {
		rk.t.Fatalf("rekey: %v: %s", err, out)
	}
	return steps, false
}

func (rk rekeyRunner) removeOldKey() {
	rk.t.Helper()
	if out, err := runMain(rk.dir, "rekey", "--remove-old-key", "--data-dir", rk.data, "--backend", rk.spec); err != nil {
		rk.t.Fatalf("rekey --remove-old-key: %v: %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(rk.data, "key.old")); !errors.Is(err, os.ErrNotExist) {
		rk.t.Fatalf("key.old after --remove-old-key: %v", err)
	}
}

// checkServeRefuses starts serve on a store whose rekey is unfinished: it
// must exit at once saying to run rekey again, and --remove-old-key and
// backup must refuse too.
func (rk rekeyRunner) checkServeRefuses() {
	rk.t.Helper()
	cmd := mainCmd(rk.dir, "serve", "--listen", freeAddr(rk.t), "--data-dir", rk.data, "--backend", rk.spec)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		rk.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(out.String(), "run `oblivkv rekey --data-dir") {
			rk.t.Fatalf("serve of an unfinished rekey's store: %v: %s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		rk.t.Fatal("serve started on a store whose rekey is unfinished")
	}
	if out, err := runMain(rk.dir, "rekey", "--remove-old-key", "--data-dir", rk.data, "--backend", rk.spec); err == nil {
		rk.t.Fatalf("--remove-old-key during a rekey: %s", out)
	}
	archive := filepath.Join(rk.t.TempDir(), "backup")
	if out, err := runMain(rk.dir, "backup", "--data-dir", rk.data, "--backend", rk.spec, "--to", archive); err == nil ||
		!strings.Contains(out, "run `oblivkv rekey --data-dir") {
		rk.t.Fatalf("backup during a rekey: %v: %s", err, out)
	}
}

// writeKeys sets k0..k(n-1), each acknowledged.
func writeKeys(t *testing.T, addr string, n int) {
	t.Helper()
	c := client(t, addr)
	for start := 0; start < n; start += 100 {
		pipe := c.Pipeline()
		for i := start; i < min(n, start+100); i++ {
			pipe.Set(t.Context(), fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i), 0)
		}
		if _, err := pipe.Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// readKeys checks k0..k(n-1) read back as writeKeys wrote them.
func readKeys(t *testing.T, addr string, n int) {
	t.Helper()
	c := client(t, addr)
	for i := range n {
		if got, err := c.Get(t.Context(), fmt.Sprintf("k%d", i)).Result(); err != nil || got != fmt.Sprintf("v%d", i) {
			t.Fatalf("GET k%d = %q, %v", i, got, err)
		}
	}
}

// checkOldKeyOpensNothing: the last rekey's old key does not open the
// store.
func checkOldKeyOpensNothing(t *testing.T, data, spec string) {
	t.Helper()
	old, err := seal.ReadKeyFile(filepath.Join(data, "key.old"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(seal.KeyEnv, hex.EncodeToString(old))
	if _, err := setup.Describe(t.Context(), setup.Options{Backend: spec, DataDir: data}); !errors.Is(err, kv.ErrWrongKey) {
		t.Fatalf("the old key: %v, want ErrWrongKey", err)
	}
}

// TestRekeyRefusesEnvKey: with the key in $OBLIVKV_KEY, rekey refuses and
// says how to re-key.
func TestRekeyRefusesEnvKey(t *testing.T) {
	master, _ := seal.GenerateMaster()
	t.Setenv(seal.KeyEnv, hex.EncodeToString(master))
	out, err := runMain(t.TempDir(), "rekey", "--data-dir", "data")
	if err == nil || !strings.Contains(out, "unset $"+seal.KeyEnv) {
		t.Fatalf("rekey with $%s set: %v: %s", seal.KeyEnv, err, out)
	}
}

// TestRekeyOnRedis: the real command re-keys a store on Redis; it serves
// every key afterwards.
func TestRekeyOnRedis(t *testing.T) {
	spec := redistest.Start(t)
	dir := t.TempDir()
	srv := startServe(t, dir, "--capacity", "256", "--value-size", "64", "--backend", spec)
	writeKeys(t, srv.addr, 100)
	srv.stop(t)
	if out, err := runMain(dir, "rekey", "--data-dir", filepath.Join(dir, "data"), "--backend", spec); err != nil {
		t.Fatalf("rekey: %v: %s", err, out)
	}
	srv = startServeAt(t, dir, srv.addr, "--backend", spec)
	readKeys(t, srv.addr, 100)
	srv.stop(t)
	checkOldKeyOpensNothing(t, filepath.Join(dir, "data"), spec)
}

// TestRekeyRefusesServedStore: a rekey of a store a server holds is
// refused, says so, and writes nothing.
func TestRekeyRefusesServedStore(t *testing.T) {
	dir := t.TempDir()
	srv := startServe(t, dir, "--capacity", "64", "--value-size", "64")
	writeKeys(t, srv.addr, 10)
	data := filepath.Join(dir, "data")
	out, err := runMain(dir, "rekey", "--data-dir", data)
	if err == nil || !strings.Contains(out, "another oblivkv running") {
		t.Fatalf("rekey of a served store: %v: %s", err, out)
	}
	for _, name := range []string{"key.new", "rekey", "rekey.state"} {
		if _, err := os.Stat(filepath.Join(data, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after a refused rekey: %v", name, err)
		}
	}
	readKeys(t, srv.addr, 10)
	srv.stop(t)
}
