package treebeard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

// crashable is a treebeard store on memory storage whose journal a test
// holds, to crash it as a process death would.
type crashable struct {
	t    *testing.T
	b    *mem.Backend
	keys *seal.Keys
	dir  string
	opts treebeard.Options
	s    kv.Store
	j    *journal.Journal
}

func (c *crashable) open(fresh bool) {
	c.t.Helper()
	j, err := journal.Open(c.dir, c.keys, journal.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.b.Reopen()
	s, err := treebeard.OpenRaw(c.t.Context(), kv.Env{Backend: c.b, Keys: c.keys, Capacity: 256, ValueSize: 16,
		Fresh: fresh, Journal: j, Options: c.opts})
	if err != nil {
		j.Crash()
		c.t.Fatal(err)
	}
	c.s, c.j = s, j
}

// crash kills the store as a process death would: its journal writes
// nothing more, so the operations in flight fail without writing to
// storage (whatever passed its record may have written), and the store's
// goroutines are wound down before storage is reopened.
func (c *crashable) crash() {
	c.j.Crash()
	c.s.Close()
}

// TestCrashRecovers: 8 clients write and delete keys of their own under
// busy evictions (A=2, K=3) while the store is crashed 10 times at random
// moments and reopened; after each crash every key reads back with its
// last acknowledged value, or with the value of the one operation on it
// that the crash cut off (its outcome is unknown), and nothing reads as
// tampered.
func TestCrashRecovers(t *testing.T) {
	c := &crashable{t: t, b: mem.New(), keys: kvtest.NewKeys(t), dir: t.TempDir(),
		opts: treebeard.Options{A: 2, K: 3, Epoch: -1}}
	c.open(true)
	r := rand.New(rand.NewPCG(5, 5))
	// Per key, one client: its last acknowledged value and the value of
	// an operation cut off ("" for a delete, or none).
	type outcome struct{ acked, cut string }
	keys := map[string]*outcome{}
	for cl := range 8 {
		for j := range 3 {
			keys[fmt.Sprint("k", cl, ".", j)] = &outcome{}
		}
	}
	for round := range 10 {
		ctx, stop := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for cl := range 8 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					k := fmt.Sprint("k", cl, ".", i%3)
					o := keys[k]
					v := fmt.Sprint(round, ".", i)
					var err error
					if i%5 == 4 {
						v, err = "", c.s.Delete(ctx, k)
					} else {
						err = c.s.Put(ctx, k, []byte(v))
					}
					if err != nil {
						o.cut = v
						return
					}
					o.acked, o.cut = v, v
				}
			})
		}
		for i := r.IntN(40); i >= 0; i-- { // let some epochs through
			if _, _, err := c.s.Get(t.Context(), "k0.0"); err != nil {
				break
			}
		}
		c.crash()
		stop()
		wg.Wait()
		c.open(false)
		for k, o := range keys {
			got, ok, err := c.s.Get(t.Context(), k)
			if err != nil || (string(got) != o.acked || ok != (o.acked != "")) && (string(got) != o.cut || ok != (o.cut != "")) {
				t.Fatalf("round %d: after the crash Get(%q) = %q, %v, %v; want %q (or %q, cut off)", round, k, got, ok, err, o.acked, o.cut)
			}
			o.acked = string(got) // the cut-off operation may have taken effect
			o.cut = o.acked
		}
	}
	if err := c.s.Close(); err != nil {
		t.Fatal(err)
	}
	c.j.Close()
}

// TestPowerLoss: with storage syncing only at checkpoints, a power cut
// loses nothing acknowledged (the journal redoes what storage lost), under
// busy evictions.
func TestPowerLoss(t *testing.T) {
	kvtest.CheckPowerLoss(t, treebeard.OpenRaw, kv.Env{Capacity: 256, ValueSize: 16, Options: treebeard.Options{A: 2, K: 3}})
}
