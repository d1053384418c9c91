package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	goredis "github.com/redis/go-redis/v9"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/backup"
	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
)

// TestBackupRestoreOnRedis runs the commands: a served store on Redis is
// stopped and backed up, the archive verified (with and without the
// key), the Redis database flushed and the data dir lost but its key;
// restore puts it back, info and INFO show the restore, and the server
// serves every key. A tampered archive is refused by verify.
func TestBackupRestoreOnRedis(t *testing.T) {
	ctx := context.Background()
	dir, url := t.TempDir(), redistest.Start(t)
	s := startServe(t, dir, append([]string{"--backend", url}, smallStore...)...)
	want := map[string]string{}
	for i := range 20 {
		k, v := fmt.Sprint("k", i), fmt.Sprint("v", i)
		if err := client(t, s.addr).Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	s.stop(t)

	if out, err := runMain(dir, "backup", "--data-dir", "data", "--backend", url, "--to", "store.bak"); err != nil || !strings.Contains(out, "backed up to store.bak") {
		t.Fatalf("backup: %v: %s", err, out)
	}
	if out, err := runMain(dir, "backup", "verify", "store.bak"); err != nil || !strings.Contains(out, "mac:            not checked") {
		t.Fatalf("verify without a key: %v: %s", err, out)
	}
	if out, err := runMain(dir, "backup", "verify", "--data-dir", "data", "store.bak"); err != nil || !strings.Contains(out, "matches the store's key") {
		t.Fatalf("verify with the key: %v: %s", err, out)
	}
	archive, err := os.ReadFile(filepath.Join(dir, "store.bak"))
	if err != nil {
		t.Fatal(err)
	}
	archive[len(archive)/3] ^= 0x10
	if err := os.WriteFile(filepath.Join(dir, "bad.bak"), archive, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runMain(dir, "backup", "verify", "bad.bak"); err == nil || !strings.Contains(out, "damaged") {
		t.Fatalf("verify of a flipped bit: %v: %s", err, out)
	}

	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(opt)
	defer rc.Close()
	if err := rc.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "data", "journal")); err != nil {
		t.Fatal(err)
	}
	if out, err := runMain(dir, "restore", "store.bak", "--data-dir", "data", "--backend", url); err != nil {
		t.Fatalf("restore: %v: %s", err, out)
	}
	if out, err := runMain(dir, "info", "--data-dir", "data", "--backend", url); err != nil || !strings.Contains(out, "restored:      from a backup at journal position") {
		t.Fatalf("info after the restore: %v: %s", err, out)
	}
	s = startServe(t, dir, "--backend", url)
	c := client(t, s.addr)
	for k, v := range want {
		if got, err := c.Get(ctx, k).Result(); err != nil || got != v {
			t.Fatalf("GET %s = %q, %v; want %q", k, got, err, v)
		}
	}
	if info, err := c.Info(ctx, "oblivkv").Result(); err != nil || !strings.Contains(info, "restored:position=") {
		t.Fatalf("INFO oblivkv after a restore: %v: %s", err, info)
	}
	s.stop(t)
}

// TestOnlineBackupUnderLoad: a served treebeard store under 16 writing
// clients is backed up through its server (on disk, and on Redis); then
// its storage and data dir (but the key) are lost, the archive restored,
// and the server started again. Every write acknowledged before the
// backup began reads back: the history up to the backup (the operations
// that overlapped it with their outcome unknown: in the archive or not)
// and a final read of every key after the restore must be linearizable
// (porcupine). The clients see no error during the pause.
func TestOnlineBackupUnderLoad(t *testing.T) {
	goredis.SetLogger(quietLogger{})
	for _, kind := range []string{"disk", "redis"} {
		t.Run(kind, func(t *testing.T) {
			spec := kind
			if kind == "redis" {
				spec = redistest.Start(t)
			}
			onlineBackupRun(t, spec)
		})
	}
}

func onlineBackupRun(t *testing.T, spec string) {
	dir := t.TempDir()
	args := []string{"--backend", spec, "--capacity", "1024", "--value-size", "64"}
	s := startServe(t, dir, args...)
	load := startWriters(t, s.addr, 16)
	load.waitFor(100)
	if info, err := os.Stat(backup.SocketFile(filepath.Join(dir, "data"))); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the backup socket: %v, %v; want mode 0600", info, err)
	}
	began := load.now()
	var paused int64 // no request sent from then on is in the archive
	archive := filepath.Join(dir, "online.bak")
	if _, err := backup.Fetch(t.Context(), filepath.Join(dir, "data"), archive, func() { paused = load.now() }); err != nil {
		t.Fatalf("online backup: %v", err)
	}
	load.waitFor(load.done() + 100)
	history := load.stop(t)
	// The pause closed and opened the store again; INFO still counts from
	// the server's start.
	c := goredis.NewClient(&goredis.Options{Addr: s.addr})
	if st := infoStats(t, c); st["ops"] < float64(len(history)) || st["backend_calls"] == 0 {
		t.Errorf("after the backup INFO counts %v operations and %v backend calls; the clients made %d operations", st["ops"], st["backend_calls"], len(history))
	}
	c.Close()
	if out, err := runMain(dir, "backup", "--data-dir", "data", "--to", "again.bak"); err != nil || !strings.Contains(out, "online, through the server") {
		t.Fatalf("backup command of a served store: %v: %s", err, out)
	}
	s.stop(t)
	t.Logf("server: %s", lineWith(s.stderr.String(), "store paused for a backup"))

	loseStore(t, dir, spec)
	if out, err := runMain(dir, "restore", "online.bak", "--data-dir", "data", "--backend", spec); err != nil {
		t.Fatalf("restore: %v: %s", err, out)
	}
	s = startServe(t, dir, "--backend", spec)
	final := finalReads(t, s.addr, load)
	s.stop(t)

	upTo, overlapped := historyUpTo(history, began, paused)
	if upTo == 0 || overlapped == 0 {
		t.Fatalf("%d operations acknowledged before the backup, %d overlapping it: the load missed the backup", upTo, overlapped)
	}
	ops := append(cutAt(history, began, paused), final...)
	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, 30*time.Second)
	t.Logf("%d operations before the backup, %d overlapping it, %d final reads: %v", upTo, overlapped, len(final), res)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		porcupine.VisualizePath(registerModel, info, path)
		t.Fatalf("the history up to the backup and the restored store's reads are not linearizable (%v): %s", res, path)
	}
}

// loseStore deletes a stopped store's storage (flushes the Redis
// database, or deletes DIR/store) and its journal; the key stays.
func loseStore(t *testing.T, dir, spec string) {
	t.Helper()
	if spec != "disk" {
		opt, err := goredis.ParseURL(spec)
		if err != nil {
			t.Fatal(err)
		}
		rc := goredis.NewClient(opt)
		defer rc.Close()
		if err := rc.FlushDB(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"store", "journal"} {
		if err := os.RemoveAll(filepath.Join(dir, "data", name)); err != nil {
			t.Fatal(err)
		}
	}
}

func lineWith(text, part string) string {
	for line := range strings.Lines(text) {
		if strings.Contains(line, part) {
			return strings.TrimSpace(line)
		}
	}
	return "(no line with " + part + ")"
}

// writers are clients writing and reading a few keys, recording every
// operation.
type writers struct {
	start time.Time
	keys  int
	stopc chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	ops   []porcupine.Operation
	errs  []error
}

// registerIn and registerOut are the operations of registerModel.
type registerIn struct {
	put        bool
	key, value string
}

type registerOut struct{ value string }

// registerModel is a register per key: a put sets it, a get returns it
// ("" for a key never put).
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(registerIn).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(registerIn)
		if in.put {
			return true, in.value
		}
		return output.(registerOut).value == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(registerIn)
		if in.put {
			return fmt.Sprintf("set %s %s", in.key, in.value)
		}
		return fmt.Sprintf("get %s -> %q", in.key, output.(registerOut).value)
	},
}

func (w *writers) now() int64 { return time.Since(w.start).Nanoseconds() }

// startWriters starts n clients, each setting (two in three) or getting
// one of 16 keys at random, until stop.
func startWriters(t *testing.T, addr string, n int) *writers {
	w := &writers{start: time.Now(), keys: 16, stopc: make(chan struct{})}
	for c := range n {
		cl := goredis.NewClient(&goredis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, ReadTimeout: 30 * time.Second})
		t.Cleanup(func() { cl.Close() })
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-w.stopc:
					return
				default:
				}
				w.one(cl, c, i)
			}
		}()
	}
	return w
}

// one runs client c's i-th operation and records it.
func (w *writers) one(cl *goredis.Client, c, i int) {
	ctx := context.Background()
	in := registerIn{put: i%3 != 2, key: fmt.Sprint("k", (c*7+i*5)%w.keys), value: fmt.Sprintf("c%d-%d", c, i)}
	call := w.now()
	var out registerOut
	var err error
	if in.put {
		err = cl.Set(ctx, in.key, in.value, 0).Err()
	} else if out.value, err = cl.Get(ctx, in.key).Result(); errors.Is(err, goredis.Nil) {
		err = nil
	}
	ret := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.errs = append(w.errs, err)
		return
	}
	w.ops = append(w.ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
}

// done returns how many operations the clients have completed.
func (w *writers) done() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ops) + len(w.errs)
}

// waitFor waits until the clients have completed n operations.
func (w *writers) waitFor(n int) {
	for w.done() < n {
		time.Sleep(10 * time.Millisecond)
	}
}

// stop stops the clients and returns their history; any error fails the
// test: a backup's pause holds requests, it never fails them.
func (w *writers) stop(t *testing.T) []porcupine.Operation {
	t.Helper()
	close(w.stopc)
	w.wg.Wait()
	if len(w.errs) > 0 {
		t.Fatalf("%d requests failed under the backup; first: %v", len(w.errs), w.errs[0])
	}
	return w.ops
}

// finalReads reads every key of the writers from the server at addr, as
// operations after every one of the history.
func finalReads(t *testing.T, addr string, w *writers) []porcupine.Operation {
	t.Helper()
	c := client(t, addr)
	var ops []porcupine.Operation
	for k := range w.keys {
		key := fmt.Sprint("k", k)
		call := w.now()
		v, err := c.Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatalf("GET %s after the restore: %v", key, err)
		}
		ops = append(ops, porcupine.Operation{ClientId: 1000, Input: registerIn{key: key}, Call: call, Output: registerOut{v}, Return: w.now()})
	}
	return ops
}

// historyUpTo counts the operations acknowledged before the backup
// began, and those sent before the store was paused that returned after
// the backup began.
func historyUpTo(history []porcupine.Operation, began, paused int64) (before, overlapped int) {
	for _, op := range history {
		switch {
		case op.Return < began:
			before++
		case op.Call < paused:
			overlapped++
		}
	}
	return before, overlapped
}

// cutAt returns the history as the archive holds it: the operations
// acknowledged before the backup began, as they were; the writes sent
// before the store was paused that returned after the backup began with
// their outcome unknown (never returned: they may take effect after
// everything, which is not at all); none sent once it was paused, which
// waited for the copy to end.
func cutAt(history []porcupine.Operation, began, paused int64) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range history {
		switch {
		case op.Return < began:
			out = append(out, op)
		case op.Call < paused && op.Input.(registerIn).put:
			op.Return = math.MaxInt64
			out = append(out, op)
		}
	}
	return out
}
