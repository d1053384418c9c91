package taostore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/taostore"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

const (
	auditCapacity = 1024 // 2^10 leaves, 11 levels
	auditRequests = 4096
	auditClients  = 8
	auditBins     = 64
	// auditP is the significance of the uniformity test: a uniform
	// source fails it with probability 0.001.
	auditP = 0.001
)

// openLogged opens a taostore over memory whose backend calls go to a log.
func openLogged(t *testing.T, b backend.Backend, log observe.Sink) kv.Store {
	t.Helper()
	return openWith(t, b, log, taostore.Options{})
}

// openWith is openLogged with options.
func openWith(t *testing.T, b backend.Backend, log observe.Sink, o taostore.Options) kv.Store {
	t.Helper()
	s, err := kv.Open(context.Background(), kv.Config{Protocol: "taostore", Backend: b,
		Keys: kvtest.NewKeys(t), Capacity: auditCapacity, ValueSize: 64, TapLog: log,
		Options: taostore.Seeded(o, 42)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// runWorkload issues auditRequests requests from auditClients clients;
// key(i) names the key of request i. It returns after every reply.
func runWorkload(t *testing.T, s kv.Store, key func(i int) string) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range auditClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < auditRequests; i = int(next.Add(1)) - 1 {
				var err error
				if i%2 == 0 {
					_, _, err = s.Get(t.Context(), key(i))
				} else {
					err = s.Put(t.Context(), key(i), []byte("v"))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// pathReads returns the leaf of every path read in records after the
// first skip records.
func pathReads(t *testing.T, records []observe.Record) []uint64 {
	t.Helper()
	geo := tree.NewGeometry(auditCapacity)
	layout := tree.Layout{Prefix: taostore.BucketPrefix}
	var leaves []uint64
	for _, r := range records {
		if r.Op != observe.OpRead || len(r.Addrs) == 1 {
			continue // the metadata and state reads of open
		}
		if len(r.Addrs) != geo.L+1 {
			t.Fatalf("a path read of %d buckets; the tree has %d levels", len(r.Addrs), geo.L+1)
		}
		bucket, ok := layout.Bucket(r.Addrs[geo.L])
		leaf, isLeaf := geo.LeafOf(bucket)
		if !ok || !isLeaf {
			t.Fatalf("path read does not end at a leaf bucket: %q", r.Addrs[geo.L])
		}
		for level, a := range r.Addrs {
			if b, _ := layout.Bucket(a); b != geo.BucketAt(leaf, level) {
				t.Fatalf("read of leaf %d is not its root-to-leaf path", leaf)
			}
		}
		leaves = append(leaves, leaf)
	}
	return leaves
}

// TestObliviousHotKeyVsUniform is audit (a): one key hammered by 8
// concurrent clients versus uniform keys, the same number of requests: in
// both, storage sees exactly one path read per request, and the leaves
// read are uniform (chi-square over 64 bins of leaves, p = 0.001).
func TestObliviousHotKeyVsUniform(t *testing.T) {
	workloads := map[string]func(i int) string{
		"hot":     func(int) string { return "the-hot-key" },
		"uniform": func(i int) string { return fmt.Sprintf("key-%d", (i*7919)%auditCapacity) },
	}
	crit := audit.ChiSquareCritical(auditBins-1, auditP)
	for name, key := range workloads {
		t.Run(name, func(t *testing.T) {
			log := &observe.MemoryLog{}
			s := openLogged(t, mem.New(), log)
			log.Reset() // the initial tree write is not part of the workload
			runWorkload(t, s, key)
			leaves := pathReads(t, log.Records())
			if len(leaves) != auditRequests {
				t.Fatalf("%d path reads for %d requests", len(leaves), auditRequests)
			}
			stat, _ := audit.ChiSquareUniform(audit.Bin(leaves, tree.NewGeometry(auditCapacity).Leaves(), auditBins))
			t.Logf("%s: %d path reads, chi-square %.1f (critical %.1f), fake reads %v", name, len(leaves), stat, crit, kvtest.Stat(t, s.Stats(), "fake_reads"))
			if stat > crit {
				t.Fatalf("leaves read are not uniform: chi-square %.1f > %.1f", stat, crit)
			}
			// The paper sees the stash stay within 2k blocks (Sec. V-C d).
			if st := kvtest.Stat(t, s.Stats(), "stash_max"); st > 2*taostore.DefaultK {
				t.Fatalf("stash reached %v blocks; bound %d", st, 2*taostore.DefaultK)
			}
		})
	}
}

// gate is a backend whose path read number hold blocks until release is
// closed, like a real read held back by an asynchronous network.
type gate struct {
	backend.Backend
	hold     int64
	reads    atomic.Int64 // path reads started
	returned atomic.Int64 // path reads returned
	release  chan struct{}
}

func (g *gate) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if len(addrs) == 1 { // metadata and state
		return g.Backend.Read(ctx, addrs)
	}
	if g.reads.Add(1) == g.hold {
		<-g.release
	}
	defer g.returned.Add(1)
	return g.Backend.Read(ctx, addrs)
}

// TestSequencerDefeatsCURIOUS is audit (b), the attack of Sec. II-B: the
// first request's real read is held back at the backend; a second request
// (the same key, so a fake read; or another key, so a real read) has its
// path returned at once. Its reply must not leave before the first one's,
// so reply order equals arrival order in both cases. The order is taken
// where replies leave, at the Sequencer: the callers' goroutines may wake
// in any order.
func TestSequencerDefeatsCURIOUS(t *testing.T) {
	for name, second := range map[string]string{"repeat": "k1", "distinct": "k2"} {
		t.Run(name, func(t *testing.T) {
			g := &gate{Backend: mem.New(), release: make(chan struct{})}
			var released []uint64 // arrival numbers, as replies leave (under the store's lock)
			var relMu sync.Mutex
			s := openWith(t, g, nil, taostore.Released(taostore.Options{}, func(a uint64) {
				relMu.Lock()
				released = append(released, a)
				relMu.Unlock()
			}))
			for _, k := range []string{"k1", "k2"} {
				if err := s.Put(t.Context(), k, []byte(k)); err != nil {
					t.Fatal(err)
				}
			}
			g.hold = g.reads.Load() + 1
			open := sync.OnceFunc(func() { close(g.release) })
			defer open() // a failing check must not leave the read held
			var order []string
			var mu sync.Mutex
			var wg sync.WaitGroup
			issue := func(name, key string) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, _, err := s.Get(context.Background(), key); err != nil {
						t.Error(err)
					}
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
				}()
			}
			issue("first", "k1")
			kvtest.WaitFor(t, "the first read to be held", func() bool { return g.reads.Load() >= g.hold })
			returnedBefore := g.returned.Load()
			issue("second", second)
			kvtest.WaitFor(t, "the second request's read to return", func() bool { return g.returned.Load() > returnedBefore })
			time.Sleep(50 * time.Millisecond) // time for a wrongly early reply to leave
			mu.Lock()
			early := len(order)
			mu.Unlock()
			if early != 0 {
				t.Fatalf("%v replied while the first request's read was held back", order)
			}
			open()
			wg.Wait()
			// Arrivals 0 and 1 are the Puts; 2 is "first", 3 "second".
			relMu.Lock()
			defer relMu.Unlock()
			if n := len(released); n != 4 || released[2] != 2 || released[3] != 3 {
				t.Fatalf("replies left in arrival order %v, want [0 1 2 3]: first before second", released)
			}
		})
	}
}
