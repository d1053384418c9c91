// Package kvtest holds the test kits every protocol runs: the kv.Store
// contract suite (RunContract) and a linearizability check of concurrent
// randomized histories with porcupine (CheckLinearizable).
//
// A protocol's tests use it in a few lines:
//
//	var cfg = kvtest.Config{Protocol: "treebeard", Integrity: true}
//	func TestMain(m *testing.M) { kvtest.Main(m) } // stops the shared redis-server
//	func TestContract(t *testing.T) {
//		for _, st := range kvtest.Storages(t) {
//			t.Run(st.Name, func(t *testing.T) { kvtest.RunContract(t, cfg, st) })
//		}
//	}
//	func TestLinearizable(t *testing.T) {
//		s := kvtest.OpenStore(t, cfg, kvtest.Mem())
//		kvtest.CheckLinearizable(t, s, kvtest.LinOptions{})
//	}
//
// The package is a normal (non-test) package so that the _test.go files of
// any protocol can import it; it must never be imported by production code.
// It owns no protocol: it opens stores through kv.Open (or Config.Open) and
// judges them only through the kv.Store contract and the backend's contents.
package kvtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// Config describes the protocol under test and what it promises.
type Config struct {
	// Protocol is the registered protocol name.
	Protocol string
	// Options is passed to kv.Config.Options.
	Options any
	// Capacity, ValueSize and MaxKeySize of the stores the suite opens
	// (defaults 64, 100 and 32). Capacity must be at least 16. The bulk
	// load test opens its store with max(Capacity, LoadItems).
	Capacity   int
	ValueSize  int
	MaxKeySize int
	// LoadItems is the number of items of the bulk load test (default 1000).
	LoadItems int
	// Integrity is true when the protocol authenticates what it stores, so
	// tampered storage must yield kv.ErrTampered (every protocol but plain).
	Integrity bool
	// NoFreshness is true when the protocol binds each item to its address
	// alone and keeps no version of it (encrypted, the strawman that
	// defeats no adversary): an older item put back at its own address
	// authenticates, and the TamperReplay case does not apply.
	NoFreshness bool
	// Durable is true when the protocol journals its trusted state
	// (internal/durable): storage rolled back behind the journal is then
	// refused at open (the DurableRollback test).
	Durable bool
	// NoLoader is true when the protocol has no bulk loader (kv.AsLoader
	// reports none); the load tests then do not run. By default a loader is
	// required.
	NoLoader bool
	// FreshAddresses is true when the protocol never writes an address it
	// wrote before and deletes every address it reads (Waffle's ids,
	// prf(key, timestamp)): an older item put back at its own address is
	// then never read again, and the TamperReplay case puts older items
	// over the addresses written since as well.
	FreshAddresses bool
	// AddrKind, if set, names the kind of a storage address, for a
	// protocol whose seal binds a part of the address on its own as well
	// as the whole (a Ring ORAM slot's index in its bucket): the
	// TamperMove case moves items only between addresses of one kind, so
	// that the part bound on its own stays the same and only the whole
	// address tells them apart. nil: every address is of one kind (items
	// are told apart by their value length in any case).
	AddrKind func(addr string) string
	// Cached, if set, tells the addresses whose items a running store
	// keeps a trusted copy of and never reads back until it is reopened
	// (Ring ORAM's bucket metadata): storage changing them while the store
	// runs changes nothing it reads, so the TamperReplay and TamperMove
	// cases leave them alone (TamperFlip and TamperSwap, which reopen the
	// store, cover them).
	Cached func(addr string) bool
	// NamesKeys is true when the protocol names the keys it holds
	// (kv.KeyLister): the StoredKeys case then checks the names, before
	// and after a restart; otherwise it checks that kv.AsKeyLister reports
	// no lister.
	NamesKeys bool
	// Open replaces kv.Open, e.g. to wire a cluster in one process. It must
	// honour every field of kv.Config that the suite sets.
	Open func(ctx context.Context, cfg kv.Config) (kv.Store, error)
}

func (c Config) withDefaults() Config {
	c.Capacity = cmp.Or(c.Capacity, 64)
	c.ValueSize = cmp.Or(c.ValueSize, 100)
	c.MaxKeySize = cmp.Or(c.MaxKeySize, 32)
	c.LoadItems = cmp.Or(c.LoadItems, 1000)
	if c.Open == nil {
		c.Open = kv.Open
	}
	return c
}

func (c Config) validate(t *testing.T) {
	t.Helper()
	switch {
	case c.Protocol == "":
		t.Fatal("kvtest: Config.Protocol is empty")
	case c.Capacity < 16:
		t.Fatalf("kvtest: Config.Capacity must be at least 16, got %d", c.Capacity)
	case c.MaxKeySize < 8:
		t.Fatalf("kvtest: Config.MaxKeySize must be at least 8, got %d", c.MaxKeySize)
	case c.ValueSize < 16:
		t.Fatalf("kvtest: Config.ValueSize must be at least 16, got %d", c.ValueSize)
	}
}

func (c Config) kvConfig(b backend.Backend, keys *seal.Keys, journal string) kv.Config {
	return kv.Config{Protocol: c.Protocol, Backend: b, Keys: keys, Capacity: c.Capacity,
		ValueSize: c.ValueSize, MaxKeySize: c.MaxKeySize, Options: c.Options, OpenJournal: Journal(journal)}
}

// Journal opens the journal in dir for kv.Config.OpenJournal, as the
// command's set-up does (internal/durable/journal).
func Journal(dir string) func(*seal.Keys) (kv.Journal, error) {
	return journal.Opener(dir, journal.Options{})
}

// Storage is untrusted storage a test runs on.
type Storage struct {
	// Name names the storage in subtest names ("mem", "disk", "redis").
	Name string
	// New prepares fresh, empty storage for one test (cleaned up with t)
	// and returns a function that opens a handle on it. Every handle sees
	// the same data, so a store can be closed (closing its handle) and
	// reopened on a new handle to test a restart. The kits keep at most one
	// handle open at a time and close every handle they open.
	New func(t *testing.T) (open func() (backend.Backend, error))
}

// Mem is storage in memory (backend/mem); reopening reuses the closed
// backend with its data.
func Mem() Storage {
	return Storage{Name: "mem", New: func(t *testing.T) func() (backend.Backend, error) {
		b := mem.New()
		return func() (backend.Backend, error) {
			b.Reopen()
			return b, nil
		}
	}}
}

// NewKeys returns fresh random sealing keys.
func NewKeys(t testing.TB) *seal.Keys {
	t.Helper()
	master, err := seal.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	k, err := seal.NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// SeededKeys returns sealing keys determined by seed, for runs that must
// repeat exactly (a protocol's addresses derived from the keys, as in a
// keyed leak, depend on them).
func SeededKeys(t testing.TB, seed byte) *seal.Keys {
	t.Helper()
	master := make([]byte, seal.MasterKeySize)
	master[0] = seed
	k, err := seal.NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// OpenStore opens a fresh store of cfg on fresh storage of st, closed when
// the test ends. It is the usual way to get a store for CheckLinearizable.
func OpenStore(t *testing.T, cfg Config, st Storage) kv.Store {
	t.Helper()
	cfg = cfg.withDefaults()
	cfg.validate(t)
	h := newHarness(t, cfg, st)
	return h.mustOpen(nil)
}

// harness opens stores of one Config on one Storage for one test, each
// with the same journal directory (the proxy's trusted disk).
type harness struct {
	t       *testing.T
	cfg     Config
	st      Storage
	open    func() (backend.Backend, error)
	keys    *seal.Keys
	journal string
}

func newHarness(t *testing.T, cfg Config, st Storage) *harness {
	return &harness{t: t, cfg: cfg, st: st, open: st.New(t), keys: NewKeys(t), journal: t.TempDir()}
}

// tryOpen opens a store on a new handle; mod may change the kv.Config. A
// failed open closes the handle (the caller still owns it after a failed
// kv.Open), so the storage can be opened again.
func (h *harness) tryOpen(mod func(*kv.Config)) (kv.Store, error) {
	h.t.Helper()
	b, err := h.open()
	if err != nil {
		h.t.Fatalf("opening %s storage handle: %v", h.cfg.Protocol, err)
	}
	kc := h.cfg.kvConfig(b, h.keys, h.journal)
	if mod != nil {
		mod(&kc)
	}
	s, err := h.cfg.Open(h.t.Context(), kc)
	if err != nil {
		b.Close()
		return nil, err
	}
	h.t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, kv.ErrClosed) {
			h.t.Errorf("closing store at cleanup: %v", err)
		}
	})
	return s, nil
}

func (h *harness) mustOpen(mod func(*kv.Config)) kv.Store {
	h.t.Helper()
	s, err := h.tryOpen(mod)
	if err != nil {
		h.t.Fatalf("opening %s store: %v", h.cfg.Protocol, err)
	}
	return s
}

// raw runs fn on a bare handle of the storage (no store open), then closes it.
func (h *harness) raw(fn func(b backend.Backend)) {
	h.t.Helper()
	b, err := h.open()
	if err != nil {
		h.t.Fatalf("opening storage handle: %v", err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			h.t.Errorf("closing storage handle: %v", err)
		}
	}()
	fn(b)
}

// stubProtocol is a registered protocol that can never open a store; the
// contract suite reopens stores under its name to check kv.ErrMismatch
// without depending on any other protocol being registered.
const stubProtocol = "kvtest-stub"

var registerStub sync.Once

func stubName() string {
	registerStub.Do(func() {
		kv.Register(kv.Protocol{Name: stubProtocol, Summary: "a test protocol that never opens a store",
			Open: func(context.Context, kv.Env) (kv.Store, error) {
				return nil, fmt.Errorf("the %s protocol never opens a store", stubProtocol)
			}})
	})
	return stubProtocol
}

// Stat returns the protocol counter name of st, and fails the test (from
// any goroutine) when the protocol has no such counter, so a renamed
// counter cannot make a check pass on a default value.
func Stat(t testing.TB, st kv.Stats, name string) float64 {
	t.Helper()
	for _, e := range st.Extra {
		if e.Name == name {
			return e.Value
		}
	}
	t.Errorf("%s has no statistic %q", st.Protocol, name)
	return 0
}

// WaitFor polls cond every millisecond and fails the test when it has not
// held within 10 seconds; what names the condition in the failure.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
