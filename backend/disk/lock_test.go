package disk_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/backend/mem"
)

// lockHelperEnv makes the test binary act as "another process" that holds a
// directory open: it opens the directory, prints "ready" and waits for its
// stdin to close.
const lockHelperEnv = "OBLIVKV_DISK_LOCK_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(lockHelperEnv); dir != "" {
		os.Exit(holdLock(dir))
	}
	os.Exit(m.Run())
}

func holdLock(dir string) int {
	b, err := disk.Open(dir)
	if err != nil {
		fmt.Println("open failed:", err)
		return 1
	}
	defer b.Close()
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n') // returns when the parent closes stdin
	return 0
}

func TestOpenLockedByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("helper process: %q", line)
	}
	b, err := disk.Open(dir)
	if err == nil {
		b.Close()
		t.Fatal("Open of a directory another process holds succeeded")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("unclear error: %v", err)
	}
}

func TestOpenTwiceInOneProcess(t *testing.T) {
	dir := t.TempDir()
	b, err := disk.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b2, err := disk.Open(dir)
	if err == nil {
		b2.Close()
		t.Fatal("second Open of the same directory succeeded")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "already open in this process") {
		t.Fatalf("unclear error: %v", err)
	}
}

// TestNoSyncCloseIsDurable checks that a clean Close makes NoSync writes
// durable, and that the lock is released for the next Open.
func TestNoSyncCloseIsDurable(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b, err := disk.OpenWith(dir, disk.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	items := make([]backend.Item, 100)
	for i := range items {
		items[i] = backend.Item{Addr: fmt.Sprint("k", i), Value: []byte(fmt.Sprint("v", i))}
	}
	if err := b.Write(ctx, items); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, err = disk.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	vals, err := b.Read(ctx, []string{"k0", "k99"})
	if err != nil || string(vals[0]) != "v0" || string(vals[1]) != "v99" {
		t.Fatalf("after reopen: %q, %v", vals, err)
	}
}

func TestCanceledContext(t *testing.T) {
	b, err := disk.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Write(ctx, []backend.Item{{Addr: "k", Value: []byte("v")}}); err != context.Canceled {
		t.Fatalf("Write with canceled context = %v, want context.Canceled", err)
	}
	vals, err := b.Read(context.Background(), []string{"k"})
	if err != nil || vals[0] != nil {
		t.Fatalf("canceled Write was applied: %q, %v", vals, err)
	}
}

// DeferSync reaches the disk backend through the wrappers a store sees
// (prefix, latency) and no other backend takes it; writes made after it
// still survive a clean close.
func TestDeferSync(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b, err := disk.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if backend.DeferSync(mem.New()) {
		t.Fatal("the memory backend took DeferSync")
	}
	wrapped := backend.WithLatency(backend.WithPrefix(b, "p/"), time.Microsecond)
	if !backend.DeferSync(wrapped) {
		t.Fatal("DeferSync through the prefix and latency wrappers was not taken")
	}
	if err := wrapped.Write(ctx, []backend.Item{{Addr: "k", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if err := backend.Sync(ctx, wrapped); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err = disk.Open(dir); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if vals, err := b.Read(ctx, []string{"p/k"}); err != nil || string(vals[0]) != "v" {
		t.Fatalf("after reopen: %q, %v", vals, err)
	}
}
