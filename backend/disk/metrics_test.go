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

// TestCacheMetrics: the block cache's capacity is Options.CacheSize
// (DefaultCacheSize unless set), and blocks read from a table fill it.
func TestCacheMetrics(t *testing.T) {
	b, err := OpenWith(t.TempDir(), Options{CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.Write(ctx, []backend.Item{{Addr: "a", Value: make([]byte, 1024)}}); err != nil {
		t.Fatal(err)
	}
	if err := b.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if m := b.Metrics(); m.CacheCapacity != 8<<20 || m.CacheBytes < 1024 {
		t.Fatalf("8 MiB cache after a table's block was read: capacity %d, holding %d bytes", m.CacheCapacity, m.CacheBytes)
	}
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.Metrics().CacheCapacity; got != DefaultCacheSize {
		t.Fatalf("default cache capacity %d, want %d", got, DefaultCacheSize)
	}
}
