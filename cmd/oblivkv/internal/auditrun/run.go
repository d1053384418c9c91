// Package auditrun runs a protocol over an observe.Tap on fixed workloads
// and judges storage's view: what `oblivkv audit` reports and its tests
// check. It owns the workloads (zipf, uniform, hotkey, missing, bursts),
// the run (a fresh store over memory, bulk loaded, driven by a few
// concurrent clients with a fixed seed, on a clock the run drives where
// the protocol hands it one: pace.go), the bound that cuts a stalled run
// off, the generic analyses (every request answered, the
// frequency-analysis attacker's score against chance, each workload
// against the reference on every observable), and the JSON and HTML forms
// of the result.
//
// What is particular to a protocol comes from its registration
// (kv.Protocol.Audit, an auditspec.Spec): its own checks of storage's
// view, its clock, its units of storage, the active checks in which
// storage acts as its adversary may. The package names no protocol.
//
// Only the Tap's records, the protocol's public parameters and what the
// clients see (when a reply leaves) go into an analysis. The run knows
// which key each request was for and when it ran, and uses that as
// ground truth to score the attacker, never as the attacker's input. It
// must never reach into a protocol's state, and it has no way to inject a
// leak: leaks are the protocols' own, chosen in builds with the
// oblivkv_leaks tag only.
package auditrun

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/seal"
)

// Config says what to audit.
type Config struct {
	Protocol  string
	Workloads []string // of Workloads; empty: DefaultWorkloads
	// Options are the protocol's options (nil: its defaults), as
	// kv.Config.Options takes them.
	Options any
	// Records is the number of keys loaded, which is also the store's
	// capacity (default 1024): every key the workloads ask for exists,
	// but the missing workload's.
	Records int
	// Ops is the number of requests per workload (0: the protocol's
	// default, DefaultOps).
	Ops int
	// Clients issue the requests concurrently (default 8); for a protocol
	// whose clock the run drives, it is also the number of requests per
	// round (pace.go).
	Clients int
	Seed    uint64
	// Timeout bounds each workload's requests (default DefaultTimeout):
	// a run that has not answered them all by then is cut off, and a
	// check reports the requests left unanswered.
	Timeout time.Duration
}

// DefaultTimeout is the default Config.Timeout: far beyond what a
// default run takes under the race detector on a loaded machine.
const DefaultTimeout = 5 * time.Minute

func (c Config) withDefaults() Config {
	c.Records = cmp.Or(c.Records, 1024)
	c.Ops = cmp.Or(c.Ops, DefaultOps(c.Protocol))
	c.Clients = cmp.Or(c.Clients, 8)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	if len(c.Workloads) == 0 {
		c.Workloads = DefaultWorkloads
	}
	return c
}

// DefaultOps is the number of requests per workload for protocol: enough
// for every statistical check to have five samples per cell, or the
// number its registration asks for (auditspec.Spec.Ops); for an insecure
// baseline, whose requests cost nothing, enough for the frequency
// attacker to rank the 100 most popular keys (a Zipf 0.99 workload gives
// key 100 about 1/770 of the requests, and its neighbours differ by 1%).
func DefaultOps(protocol string) int {
	p, _ := kv.Lookup(protocol)
	switch {
	case p.Insecure():
		return 40000
	case p.Audit != nil && p.Audit.Ops > 0:
		return p.Audit.Ops
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
	// after the bulk load; Closing is how many of All came before the
	// store's Close.
	All, Records []observe.Record
	Closing      int
	Requests     []Request
	// Marks are the Tap sequence numbers at which the run moved the
	// protocol's clock (auditspec.Round.Mark): the last call before.
	Marks []uint64
	// Unanswered counts the requests not answered when the run was cut
	// off (Stalled says why); 0 when every request was answered.
	Unanswered int
	Stalled    string
	Stats      kv.Stats
}

// run opens a fresh store of cfg.Protocol over memory, loads cfg.Records
// keys, issues the workload's requests as the protocol's pacing says
// (pace.go) and closes the store, so that everything the requests owe
// storage (evictions, write-backs) is in the log.
func run(ctx context.Context, cfg Config, name string, keys []int) (*Run, error) {
	p, err := pacingFor(cfg.Protocol, cfg.Options)
	if err != nil {
		return nil, err
	}
	log := &observe.MemoryLog{}
	s, done, err := open(ctx, cfg, p, log)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := load(ctx, s, cfg.Records); err != nil {
		s.Close()
		return nil, err
	}
	loaded := len(log.Records())
	r := &Run{Workload: name}
	d := newDriver(s, log, keys, cfg.Records, cfg.Clients)
	dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	err = p.drive(dctx, d)
	cancel()
	if errors.Is(err, auditspec.ErrStalled) {
		r.Stalled, err = err.Error(), nil
	}
	r.Requests, r.Marks, r.Unanswered = d.reqs, d.marks, d.unanswered()
	r.Stats = s.Stats()
	r.Closing = int(log.LastSeq())
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

// open opens a fresh store of cfg.Protocol over memory with the pacing's
// options, journaled in a temporary directory when the pacing asks; done
// removes that directory once the store is closed.
func open(ctx context.Context, cfg Config, p pacing, log *observe.MemoryLog) (s kv.Store, done func(), err error) {
	master := make([]byte, seal.MasterKeySize)
	rand.Read(master)
	sk, err := seal.NewKeys(master)
	if err != nil {
		return nil, nil, err
	}
	kc := kv.Config{Protocol: cfg.Protocol, Backend: mem.New(), Keys: sk, Capacity: cfg.Records,
		ValueSize: 32, MaxKeySize: 32, TapLog: log, Options: p.options}
	done = func() {}
	if p.journal {
		dir, err := os.MkdirTemp("", "oblivkv-audit-")
		if err != nil {
			return nil, nil, err
		}
		done = func() { os.RemoveAll(dir) }
		// What storage sees needs no fsync.
		kc.OpenJournal, kc.NoFsync = journal.Opener(dir, journal.Options{NoSync: true}), true
	}
	if s, err = kv.Open(ctx, kc); err != nil {
		done()
		return nil, nil, err
	}
	return s, done, nil
}

// view is what the protocol's own analysis sees of r (auditspec.Run).
func (r *Run) view(cfg Config) auditspec.Run {
	return auditspec.Run{Protocol: cfg.Protocol, Workload: r.Workload, Options: cfg.Options, Capacity: cfg.Records,
		All: r.All, Records: r.Records, Closing: r.Closing, Requests: len(r.Requests), Unanswered: r.Unanswered,
		Marks: r.Marks, Stats: extras(r.Stats)}
}

// extras returns the protocol's statistics of st by name (the first of
// a name).
func extras(st kv.Stats) map[string]float64 {
	m := make(map[string]float64, len(st.Extra))
	for _, e := range st.Extra {
		if _, ok := m[e.Name]; !ok {
			m[e.Name] = e.Value
		}
	}
	return m
}

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
