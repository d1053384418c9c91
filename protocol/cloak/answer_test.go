package cloak_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/cloak"
)

// gatedWrites holds every Write while its gate is closed.
type gatedWrites struct {
	backend.Backend
	gate chan struct{} // nil: open
}

func (g *gatedWrites) Write(ctx context.Context, items []backend.Item) error {
	if g.gate != nil {
		<-g.gate
	}
	return g.Backend.Write(ctx, items)
}

// TestReadAnsweredBeforeWriteBack: a read that misses the cache is
// answered once its batch is read, while the batch's write-back is still
// held (Sec. 4.1: the proxy replies to pending clients upon receiving the
// server's response, then writes back). A read that arrives during that
// write-back is answered too, and the write-back then completes.
func TestReadAnsweredBeforeWriteBack(t *testing.T) {
	ctx := t.Context()
	g := &gatedWrites{Backend: mem.New()}
	s, err := cloak.OpenRaw(ctx, kv.Env{Backend: g, Keys: kvtest.NewKeys(t), Capacity: 16, ValueSize: 8, MaxKeySize: 8,
		Fresh: true, Options: cloak.Options{Delta: time.Hour, Cache: 1}}) // batches only by RunBatch
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(ctx, "k", []byte("v-k")); err != nil {
		t.Fatal(err)
	}
	for i := 0; kvtest.Stat(t, s.Stats(), "pending_keys") > 0; i++ {
		if i == 100 {
			t.Fatal("the write never reached storage")
		}
		cloak.RunBatch(s)
	}
	if err := s.Put(ctx, "other", []byte("v-other")); err != nil { // evicts k from the cache
		t.Fatal(err)
	}

	g.gate = make(chan struct{})
	release := sync.OnceFunc(func() { close(g.gate) })
	defer release() // before Close, which waits for the batch
	got := make(chan string, 2)
	get := func() {
		v, ok, err := s.Get(ctx, "k")
		if err != nil || !ok {
			v = []byte("error")
		}
		got <- string(v)
	}
	go get()
	kvtest.WaitFor(t, "the read to wait for a batch", func() bool { return kvtest.Stat(t, s.Stats(), "pending_keys") == 2 })
	batchDone := make(chan struct{})
	go func() { cloak.RunBatch(s); close(batchDone) }()
	for range 2 {
		select {
		case v := <-got:
			if v != "v-k" {
				t.Fatalf("Get(k) = %q during the write-back; want v-k", v)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Get(k) waited for the write-back")
		}
		go get() // arrives while the write-back is held
	}
	release()
	<-batchDone
	if v := <-got; v != "v-k" {
		t.Fatalf("Get(k) after the batch = %q; want v-k", v)
	}
}
