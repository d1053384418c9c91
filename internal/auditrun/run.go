// Package auditrun runs a protocol over an observe.Tap on fixed workloads
// and judges storage's view with the analyses of package audit: what
// `oblivkv audit` reports and its tests check. It owns the workloads
// (zipf, uniform, hotkey), the run (a fresh store over memory, bulk
// loaded, driven by a few concurrent clients with a fixed seed), the
// table of which analyses apply to which protocol, the frequency-analysis
// attacker's score against chance, and the JSON and HTML forms of the
// result.
//
// Only the Tap's records go into an analysis. The run knows which key
// each request was for and when it ran, and uses that as ground truth to
// score the attacker, never as the attacker's input. It must never reach
// into a protocol's state, and it has no way to inject a leak: leaks are
// the protocols' own, chosen in builds with the oblivkv_leaks tag only.
package auditrun

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
	"github.com/oblivkv/oblivkv/seal"
)

// Config says what to audit.
type Config struct {
	Protocol  string
	Workloads []string // of Workloads; empty: all of them
	// Records is the number of keys loaded, which is also the store's
	// capacity (default 1024): every key the workloads ask for exists.
	Records int
	// Ops is the number of requests per workload (0: the protocol's
	// default, DefaultOps).
	Ops int
	// Clients issue the requests concurrently (default 8).
	Clients int
	Seed    uint64
	// MinDuration keeps the store open, idle, until this long after the
	// requests began (default: a second for cloak, whose batches leave
	// every 20 ms whether clients ask or not, so that a run of cache hits
	// still shows storage batches; none for the others).
	MinDuration time.Duration
}

func (c Config) withDefaults() Config {
	c.Records = cmp.Or(c.Records, 1024)
	c.Ops = cmp.Or(c.Ops, DefaultOps(c.Protocol))
	c.Clients = cmp.Or(c.Clients, 8)
	if c.MinDuration == 0 && c.Protocol == "cloak" {
		c.MinDuration = time.Second
	}
	if len(c.Workloads) == 0 {
		c.Workloads = Workloads
	}
	return c
}

// DefaultOps is the number of requests per workload for protocol: enough
// for every statistical check to have five samples per cell, and for the
// baselines, whose requests cost nothing, enough for the frequency
// attacker to rank the 100 most popular keys (a Zipf 0.99 workload gives
// key 100 about 1/770 of the requests, and its neighbours differ by 1%).
func DefaultOps(protocol string) int {
	switch protocol {
	case "plain", "encrypted":
		return 40000
	case "cloak":
		return 1500 // a batch every 20 ms
	}
	return 3000
}

// Request is one request of a run: the key's index (its popularity rank
// in zipf) and the Tap sequence numbers around it: the calls numbered
// From+1..To were recorded while it was in flight (with several clients,
// some for other requests).
type Request struct {
	Key      int
	From, To uint64
}

// Run is one workload's run.
type Run struct {
	Workload string
	// All is every Tap record from the store's creation; Records those
	// after the bulk load.
	All, Records []observe.Record
	Requests     []Request
	Stats        kv.Stats
}

// run opens a fresh store of cfg.Protocol over memory, loads cfg.Records
// keys, issues the workload's requests and closes the store, so that
// everything the requests owe storage (evictions, write-backs) is in the
// log.
func run(ctx context.Context, cfg Config, name string, keys []int) (*Run, error) {
	log := &observe.MemoryLog{}
	master := make([]byte, seal.MasterKeySize)
	rand.Read(master)
	sk, err := seal.NewKeys(master)
	if err != nil {
		return nil, err
	}
	s, err := kv.Open(ctx, kv.Config{Protocol: cfg.Protocol, Backend: mem.New(), Keys: sk,
		Capacity: cfg.Records, ValueSize: 32, MaxKeySize: 32, TapLog: log, Options: protocolOptions[cfg.Protocol]})
	if err != nil {
		return nil, err
	}
	if err := load(ctx, s, cfg.Records); err != nil {
		s.Close()
		return nil, err
	}
	loaded := len(log.Records())
	r := &Run{Workload: name}
	start := time.Now()
	r.Requests, err = drive(ctx, s, log, keys, cfg.Clients)
	time.Sleep(cfg.MinDuration - time.Since(start))
	r.Stats = s.Stats()
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", cfg.Protocol, name, err)
	}
	r.All = log.Records()
	r.Records = r.All[loaded:]
	return r, nil
}

// protocolOptions are the options a protocol runs with here, where not
// its defaults. Treebeard's Routers forward every request as its own
// epoch (Epoch < 0): with epochs on the clock, how many requests an epoch
// holds depends on how fast the machine serves each workload, so the
// counts of the workloads' views would differ by timing alone (its audit
// test takes the epochs off the clock instead, which only a test can).
var protocolOptions = map[string]any{"treebeard": treebeard.Options{Epoch: -1}}

func keyName(i int) string { return fmt.Sprintf("key-%05d", i) }

// load writes n keys, in one bulk load where the protocol has one.
func load(ctx context.Context, s kv.Store, n int) error {
	all := func(yield func(string, []byte) bool) {
		for i := range n {
			if !yield(keyName(i), []byte("v0")) { // as long as the Puts' values
				return
			}
		}
	}
	if l, ok := kv.AsLoader(s); ok {
		got, err := l.Load(ctx, all)
		if err == nil && got != n {
			err = fmt.Errorf("bulk load wrote %d of %d keys", got, n)
		}
		return err
	}
	for k, v := range all {
		if err := s.Put(ctx, k, v); err != nil {
			return err
		}
	}
	return nil
}

// drive issues keys from clients concurrently: client c issues requests
// c, c+clients, ..., each a Get when its index is even and a Put
// otherwise, and records the Tap sequence numbers around each.
func drive(ctx context.Context, s kv.Store, log *observe.MemoryLog, keys []int, clients int) ([]Request, error) {
	reqs := make([]Request, len(keys))
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < len(keys) && errs[c] == nil; i += clients {
				k := keyName(keys[i])
				reqs[i] = Request{Key: keys[i], From: log.LastSeq()}
				if i%2 == 0 {
					_, _, errs[c] = s.Get(ctx, k)
				} else {
					errs[c] = s.Put(ctx, k, []byte{byte(i), byte(i >> 8)})
				}
				reqs[i].To = log.LastSeq()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return reqs, nil
}
