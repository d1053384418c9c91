package cloak_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/cloak"
)

// gatedWrites holds every Write while its gate is closed, and can report
// a Write that took effect as failed.
type gatedWrites struct {
	backend.Backend
	gate chan struct{} // nil: open
	lie  atomic.Bool   // the next Write is applied, then reported failed
}

func (g *gatedWrites) Write(ctx context.Context, items []backend.Item) error {
	if g.gate != nil {
		<-g.gate
	}
	err := g.Backend.Write(ctx, items)
	if err == nil && g.lie.CompareAndSwap(true, false) {
		return errors.New("timeout (but applied)")
	}
	return err
}

// openGated opens a store whose batches run only by cloak.RunBatch, with
// a cache of one entry.
func openGated(t *testing.T) (kv.Store, *gatedWrites) {
	g := &gatedWrites{Backend: mem.New()}
	s, err := cloak.OpenRaw(t.Context(), kv.Env{Backend: g, Keys: kvtest.NewKeys(t), Capacity: 16, ValueSize: 8, MaxKeySize: 8,
		Fresh: true, Options: cloak.Options{Delta: time.Hour, Cache: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, g
}

// drain runs batches until no request waits.
func drain(t *testing.T, s kv.Store) {
	for i := 0; kvtest.Stat(t, s.Stats(), "pending_keys") > 0; i++ {
		if i == 100 {
			t.Fatal("requests still wait after 100 batches")
		}
		cloak.RunBatch(s)
	}
}

// TestReadAnsweredBeforeWriteBack: a read that misses the cache is
// answered once its batch is read, while the batch's write-back is still
// held (Sec. 4.1: the proxy replies to pending clients upon receiving the
// server's response, then writes back). A read that arrives during that
// write-back is answered too, and the write-back then completes.
func TestReadAnsweredBeforeWriteBack(t *testing.T) {
	ctx := t.Context()
	s, g := openGated(t)
	if err := s.Put(ctx, "k", []byte("v-k")); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	if err := s.Put(ctx, "other", []byte("v-other")); err != nil { // evicts k from the cache
		t.Fatal(err)
	}

	g.gate = make(chan struct{})
	release := sync.OnceFunc(func() { close(g.gate) })
	t.Cleanup(release) // before Close, which waits for the batch
	answered := func(what string, got <-chan string) {
		t.Helper()
		select {
		case v := <-got:
			if v != "v-k" {
				t.Fatalf("%s: Get(k) = %q; want v-k", what, v)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Get(k) waited for the write-back", what)
		}
	}
	held := goGet(s, "k")
	kvtest.WaitFor(t, "the read to wait for a batch", func() bool { return kvtest.Stat(t, s.Stats(), "pending_keys") == 2 })
	batchDone := make(chan struct{})
	go func() { cloak.RunBatch(s); close(batchDone) }()
	answered("the read the batch holds", held)
	answered("a read during the write-back", goGet(s, "k"))
	release()
	<-batchDone
}

// TestWriteBackReportedFailed: a write-back that storage applied but
// reported as failed is found on storage when the batch is sent again; the
// batch then commits, nothing is lost and later batches run.
func TestWriteBackReportedFailed(t *testing.T) {
	ctx := t.Context()
	s, g := openGated(t)
	want := map[string]string{"a": "1", "b": "2", "c": "3"}
	for k, v := range want {
		if err := s.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	g.lie.Store(true)
	cloak.RunBatch(s)
	if n := kvtest.Stat(t, s.Stats(), kv.StatBatchErrors); n != 1 {
		t.Fatalf("batch_errors = %v after a write-back reported failed; want 1", n)
	}
	drain(t, s)
	for range 20 {
		cloak.RunBatch(s)
	}
	if n := kvtest.Stat(t, s.Stats(), kv.StatBatchErrors); n != 1 {
		t.Fatalf("batch_errors = %v; want 1: the batch sent again did not recognise its own write-back", n)
	}
	for k, v := range want {
		if got := getByBatches(t, s, k); got != v {
			t.Fatalf("Get(%s) = %q; want %q", k, got, v)
		}
	}
}

// goGet reads key in a goroutine; the channel gets its value, or a
// description of what Get returned instead.
func goGet(s kv.Store, key string) <-chan string {
	got := make(chan string, 1)
	go func() {
		v, ok, err := s.Get(context.Background(), key)
		if err != nil || !ok {
			v = []byte(fmt.Sprintf("found=%v err=%v", ok, err))
		}
		got <- string(v)
	}()
	return got
}

// getByBatches reads key, running batches until the read is answered.
func getByBatches(t *testing.T, s kv.Store, key string) string {
	got := goGet(s, key)
	for range 100 {
		select {
		case v := <-got:
			return v
		case <-time.After(time.Millisecond):
			cloak.RunBatch(s)
		}
	}
	t.Fatalf("Get(%s) not answered after 100 batches", key)
	return ""
}
