package disk

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/oblivkv/oblivkv/backend"
)

func TestMetrics(t *testing.T) {
	b, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 100 {
		if err := b.Write(ctx, []backend.Item{{Addr: fmt.Sprint("a", i), Value: make([]byte, 1024)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Read(ctx, []string{"a1", "a2"}); err != nil {
		t.Fatal(err)
	}
	m := b.Metrics()
	if m.WALBytes < 100*1024 || m.DiskBytes == 0 {
		t.Fatalf("after 100 KiB written: %+v; want the WAL's bytes and the database's size", m)
	}
	events := b.stalls.listener()
	events.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "test"})
	events.WriteStallEnd()
	if got := b.Metrics(); got.WriteStalls != 1 || got.WriteStallSeconds < 0 {
		t.Fatalf("after one stall: %d stalls, %v s", got.WriteStalls, got.WriteStallSeconds)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if m := b.Metrics(); m != (Metrics{}) {
		t.Fatalf("after Close: %+v, want zero", m)
	}
}
