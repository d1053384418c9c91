package disk_test

// BenchmarkDiskEngines compares pebble (through this package) with
// go.etcd.io/bbolt on the ORAM-shaped workload: 64k addresses holding 1 KiB
// blocks, batched writes of 64 blocks to random addresses, batched reads of
// 20 random addresses. bbolt is imported only here, so it is a test-only
// dependency. Results and the decision: docs/dependencies.md.
//
//	go test -run '^$' -bench DiskEngines -benchtime 2s ./backend/disk

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
)

const (
	benchAddrs     = 64 << 10
	benchValueSize = 1 << 10
	benchWriteN    = 64
	benchReadN     = 20
)

// engine is the part of backend.Backend the benchmark needs.
type engine interface {
	Read(ctx context.Context, addrs []string) ([][]byte, error)
	Write(ctx context.Context, items []backend.Item) error
	Close() error
}

func BenchmarkDiskEngines(b *testing.B) {
	engines := []struct {
		name string
		open func(dir string) (engine, error)
	}{
		{"pebble-sync", func(dir string) (engine, error) { return disk.Open(dir) }},
		{"pebble-nosync", func(dir string) (engine, error) { return disk.OpenWith(dir, disk.Options{NoSync: true}) }},
		{"pebble-sync-cache8M", func(dir string) (engine, error) { return disk.OpenWith(dir, disk.Options{CacheSize: 8 << 20}) }},
		{"bbolt-sync", func(dir string) (engine, error) { return openBolt(dir, false) }},
		{"bbolt-nosync", func(dir string) (engine, error) { return openBolt(dir, true) }},
	}
	for _, e := range engines {
		store, err := e.open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		populate(b, store)
		b.Run(e.name+"/read20", func(b *testing.B) { benchRead(b, store) })
		b.Run(e.name+"/write64", func(b *testing.B) { benchWrite(b, store, 1) })
		b.Run(e.name+"/write64x16", func(b *testing.B) { benchWrite(b, store, 16) })
		store.Close()
	}
}

func benchAddr(i int) string { return fmt.Sprintf("block/%08d", i) }

// randomValue returns a block of random bytes: stored blocks are ciphertext,
// so compression must not be allowed to flatter an engine.
func randomValue() []byte {
	v := make([]byte, benchValueSize)
	for i := range v {
		v[i] = byte(rand.Uint32())
	}
	return v
}

func populate(b *testing.B, store engine) {
	value := randomValue()
	for start := 0; start < benchAddrs; start += 4096 {
		items := make([]backend.Item, 4096)
		for i := range items {
			items[i] = backend.Item{Addr: benchAddr(start + i), Value: value}
		}
		if err := store.Write(context.Background(), items); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRead(b *testing.B, store engine) {
	addrs := make([]string, benchReadN)
	b.SetBytes(benchReadN * benchValueSize)
	for b.Loop() {
		for i := range addrs {
			addrs[i] = benchAddr(rand.IntN(benchAddrs))
		}
		if _, err := store.Read(context.Background(), addrs); err != nil {
			b.Fatal(err)
		}
	}
}

// benchWrite runs parallelism*GOMAXPROCS writers, each writing batches.
func benchWrite(b *testing.B, store engine, parallelism int) {
	b.SetBytes(benchWriteN * benchValueSize)
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		items := make([]backend.Item, benchWriteN)
		for i := range items {
			items[i].Value = randomValue()
		}
		for pb.Next() {
			for i := range items {
				items[i].Addr = benchAddr(rand.IntN(benchAddrs))
			}
			if err := store.Write(context.Background(), items); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// boltEngine is the minimal bbolt equivalent of the disk backend: one
// update transaction per Write, one read transaction per Read.
type boltEngine struct{ db *bolt.DB }

var boltBucket = []byte("blocks")

func openBolt(dir string, noSync bool) (*boltEngine, error) {
	db, err := bolt.Open(dir+"/bolt.db", 0o600, &bolt.Options{NoSync: noSync})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	})
	return &boltEngine{db}, err
}

func (e *boltEngine) Read(_ context.Context, addrs []string) ([][]byte, error) {
	out := make([][]byte, len(addrs))
	return out, e.db.View(func(tx *bolt.Tx) error {
		bucket := tx.Bucket(boltBucket)
		for i, a := range addrs {
			if v := bucket.Get([]byte(a)); v != nil {
				out[i] = append(make([]byte, 0, len(v)), v...)
			}
		}
		return nil
	})
}

func (e *boltEngine) Write(_ context.Context, items []backend.Item) error {
	return e.db.Update(func(tx *bolt.Tx) error {
		bucket := tx.Bucket(boltBucket)
		for _, it := range items {
			if err := bucket.Put([]byte(it.Addr), it.Value); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *boltEngine) Close() error { return e.db.Close() }
