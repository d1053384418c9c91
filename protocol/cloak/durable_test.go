package cloak_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/cloak"
	"github.com/oblivkv/oblivkv/seal"
)

// faulty fails backend calls on demand.
type faulty struct {
	backend.Backend
	failRead   atomic.Bool                   // the next Read fails
	failWrite  atomic.Bool                   // the next Write fails, not applied
	lieWrite   atomic.Bool                   // the next Write is applied, then reported failed
	failNth    atomic.Int64                  // when positive, counts Writes down; the one that reaches 0 fails
	failAnchor atomic.Bool                   // every write of the checkpoint anchor fails
	gate       atomic.Pointer[chan struct{}] // when set, Writes wait for it to close

	mu      sync.Mutex
	calls   []string // when not nil, the calls made, as "op addr..."
	waiting int      // Writes waiting at the gate
}

// writesWaiting reports whether a Write waits at the gate.
func (f *faulty) writesWaiting() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting > 0
}

// record notes a call when calls are being recorded.
func (f *faulty) record(op string, addrs []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls != nil {
		f.calls = append(f.calls, fmt.Sprint(op, " ", addrs))
	}
}

// recording records the calls of fn and returns them.
func (f *faulty) recording(fn func()) []string {
	f.mu.Lock()
	f.calls = []string{}
	f.mu.Unlock()
	fn()
	f.mu.Lock()
	defer f.mu.Unlock()
	calls := f.calls
	f.calls = nil
	return calls
}

var errInjected = errors.New("injected failure")

func (f *faulty) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	f.record("read", addrs)
	if f.failRead.CompareAndSwap(true, false) {
		return nil, errInjected
	}
	return f.Backend.Read(ctx, addrs)
}

func (f *faulty) Write(ctx context.Context, items []backend.Item) error {
	return f.write(items, func() error { return f.Backend.Write(ctx, items) })
}

// WriteFenced is taken as Write is: the store fences only the anchor.
func (f *faulty) WriteFenced(ctx context.Context, fence backend.Fence, items []backend.Item) error {
	return f.write(items, func() error { return f.Backend.WriteFenced(ctx, fence, items) })
}

// write records a Write of items and applies the armed faults around
// store, which stores them.
func (f *faulty) write(items []backend.Item, store func() error) error {
	addrs := make([]string, len(items))
	for i, it := range items {
		addrs[i] = it.Addr
	}
	f.record("write", addrs)
	if g := f.gate.Load(); g != nil {
		f.mu.Lock()
		f.waiting++
		f.mu.Unlock()
		<-*g
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
	}
	if f.failWrite.CompareAndSwap(true, false) ||
		f.failNth.Load() > 0 && f.failNth.Add(-1) == 0 ||
		f.failAnchor.Load() && items[0].Addr == durable.AnchorAddr {
		return errInjected
	}
	if err := store(); err != nil {
		return err
	}
	if f.lieWrite.CompareAndSwap(true, false) {
		return errInjected
	}
	return nil
}

// crashable is a store with its own journal, which a test crashes as a
// process death would: batches stop, records not yet durable are lost,
// storage keeps what it received.
type crashable struct {
	t    *testing.T
	b    backend.Backend
	keys *seal.Keys
	dir  string
	s    kv.Store
	j    *journal.Journal
	// opens and checkpoints count the opens and the checkpoints of the
	// journals crashed so far.
	opens, checkpoints int
}

// newCrashable creates a store of capacity 16 whose batches run only by
// cloak.RunBatch, with a cache of one entry, so reads go to storage.
func newCrashable(t *testing.T, b backend.Backend) *crashable {
	c := &crashable{t: t, b: b, keys: kvtest.NewKeys(t), dir: t.TempDir()}
	c.open(true)
	t.Cleanup(func() {
		if c.s != nil {
			c.s.Close()
			c.j.Close()
		}
	})
	return c
}

func (c *crashable) open(fresh bool) {
	c.t.Helper()
	j, err := journal.Open(c.dir, c.keys, journal.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	s, err := cloak.OpenRaw(c.t.Context(), kv.Env{Backend: c.b, Keys: c.keys, Capacity: 16, ValueSize: 8, MaxKeySize: 8,
		Fresh: fresh, Journal: j, Options: cloak.Options{Delta: time.Hour, Cache: 1}})
	if err != nil {
		j.Crash()
		c.s = nil
		c.t.Fatalf("recovering: %v", err)
	}
	c.s, c.j = s, j
	c.opens++
}

// crash kills the store and opens it again from its journal.
func (c *crashable) crash() {
	c.t.Helper()
	cloak.Halt(c.s)
	c.checkpoints += int(c.j.Stats().Checkpoints)
	c.j.Crash()
	c.open(false)
}

// recoveryView checks the calls of a recovery: the anchor's read, only
// Writes, the anchor's write.
func recoveryView(calls []string) error {
	const read, write = "read [meta/anchor]", "write [meta/anchor]"
	if len(calls) < 2 || calls[0] != read || calls[len(calls)-1] != write {
		return fmt.Errorf("recovery made the calls %q; want %q first and %q last", calls, read, write)
	}
	for _, c := range calls[1 : len(calls)-1] {
		if !strings.HasPrefix(c, "write ") || c == write {
			return fmt.Errorf("recovery made the call %q; want only the journal's Writes between the anchor's", c)
		}
	}
	return nil
}

// model is what the store must hold: every key once written, with its
// value ("" for deleted).
type model map[string]string

func (m model) put(t *testing.T, s kv.Store, k, v string) {
	t.Helper()
	if err := s.Put(t.Context(), k, []byte(v)); err != nil {
		t.Fatalf("Put(%s): %v", k, err)
	}
	m[k] = v
}

func (m model) del(t *testing.T, s kv.Store, k string) {
	t.Helper()
	if err := s.Delete(t.Context(), k); err != nil {
		t.Fatalf("Delete(%s): %v", k, err)
	}
	m[k] = ""
}

// check reads every key, running batches as reads need them.
func (m model) check(t *testing.T, s kv.Store, when string) {
	t.Helper()
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		want := m[k]
		if want == "" {
			want = "found=false err=<nil>"
		}
		if got := getByBatches(t, s, k); got != want {
			t.Fatalf("%s: Get(%s) = %q; want %q", when, k, got, want)
		}
	}
}

// TestCrashRecovers: nothing acknowledged is lost to a crash wherever it
// lands: before any batch took the writes, between a batch's record and
// its Read (the Read failed), between its Read and its Write (the Write
// failed), after a Write storage applied but reported failed, after a
// batch whose commit record was not yet durable, and across checkpoints.
// Recovery reads the anchor, issues again the write-backs the journal
// holds (Writes storage saw before) and writes the anchor, nothing else;
// the batch the crash cut short is then sent again unchanged: storage
// sees the same Read again.
func TestCrashRecovers(t *testing.T) {
	f := &faulty{Backend: mem.New()}
	wit := durabletest.NewWitness(f)
	var log observeReads
	c := newCrashable(t, log.wrap(wit))
	m := model{}
	for i := range 6 {
		m.put(t, c.s, fmt.Sprint("k", i), fmt.Sprint("a", i))
	}
	m.del(t, c.s, "k5")
	c.crash() // no batch ran
	m.check(t, c.s, "a crash before any batch")
	drain(t, c.s)

	for _, fault := range []struct {
		name string
		arm  func()
	}{
		{"a crash between a batch's record and its Read", func() { f.failRead.Store(true) }},
		{"a crash between a batch's Read and its Write", func() { f.failWrite.Store(true) }},
		{"a crash after a Write applied but reported failed", func() { f.lieWrite.Store(true) }},
		{"a crash after a batch committed", func() {}},
	} {
		m.put(t, c.s, "k0", fault.name[:8])
		m.put(t, c.s, "k5", "back")
		m.del(t, c.s, "k1")
		m.put(t, c.s, "new", "x")
		fault.arm()
		cloak.RunBatch(c.s)
		cut := log.last()
		// Recovery itself shows storage only that it happened: it reads
		// the anchor, writes again what it saw written, and checkpoints.
		wit.Recovering(true)
		calls := f.recording(c.crash)
		wit.Recovering(false)
		if err := recoveryView(calls); err != nil {
			t.Errorf("%s: %v", fault.name, err)
		}
		if n := wit.Novel(); n != 0 {
			t.Errorf("%s: recovery made %d Writes storage had not seen", fault.name, n)
		}
		// The cut batch's commit was never durable: it is sent again.
		cloak.RunBatch(c.s)
		if !slices.Equal(log.last(), cut) {
			t.Errorf("%s: the first batch after recovery read other addresses than the batch cut short", fault.name)
		}
		m.check(t, c.s, fault.name)
		drain(t, c.s)
		m.check(t, c.s, fault.name+", then batches")
	}

	cloak.SetCheckpointEvery(c.s, 3)
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 30 {
		for range r.IntN(4) {
			k := fmt.Sprint("k", r.IntN(10))
			if r.IntN(4) == 0 {
				m.del(t, c.s, k)
			} else {
				m.put(t, c.s, k, fmt.Sprint("r", round))
			}
		}
		for range r.IntN(3) {
			switch r.IntN(5) {
			case 0:
				f.failWrite.Store(true)
			case 1:
				f.lieWrite.Store(true)
			}
			cloak.RunBatch(c.s)
			f.failWrite.Store(false) // armed still if the batch found its write-back and wrote nothing
			f.lieWrite.Store(false)
		}
		if round%3 == 0 {
			c.crash()
			cloak.SetCheckpointEvery(c.s, 3)
			m.check(t, c.s, fmt.Sprint("round ", round))
		}
	}
	c.crash()
	m.check(t, c.s, "the end")
	// A clean Close with a batch to send again checkpoints it.
	m.put(t, c.s, "k0", "closed")
	f.failWrite.Store(true)
	cloak.RunBatch(c.s)
	cut := log.last()
	if err := c.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.j.Close(); err != nil {
		t.Fatal(err)
	}
	c.checkpoints += int(c.j.Stats().Checkpoints) - 1 // less the Close's
	f.Backend.(*mem.Backend).Reopen()
	c.open(false)
	cloak.RunBatch(c.s)
	if !slices.Equal(log.last(), cut) {
		t.Error("the first batch after a clean restart read other addresses than the batch that failed before it")
	}
	m.check(t, c.s, "a clean restart with a batch to send again")
	// Every open checkpoints once (creation, or the end of recovery); the
	// store open now has not counted its own yet.
	if n := c.checkpoints - (c.opens - 1); n < 5 {
		t.Errorf("%d checkpoints after batches; want several", n)
	}
	if n := kvtest.Stat(t, c.s.Stats(), kv.StatBatchErrors); n == 0 {
		t.Error("no batch failed: the faults missed")
	}
}

// TestCrashInsertDuringBatch: a new key written while a batch is in
// flight may take a free address that batch read as a dummy (the batch
// then moves the key's reservation to the address it writes the element
// to). Recovery replays that, whether the crash comes before the batch's
// commit is durable or after.
func TestCrashInsertDuringBatch(t *testing.T) {
	f := &faulty{Backend: mem.New()}
	var log observeReads
	c := newCrashable(t, log.wrap(f))
	m := model{}
	hit := 0
	for round := 0; round < 40 && hit < 4; round++ {
		gate := make(chan struct{})
		f.gate.Store(&gate)
		done := make(chan struct{})
		go func() { cloak.RunBatch(c.s); close(done) }()
		kvtest.WaitFor(t, "the batch's Read", func() bool { return len(log.last()) > 0 && f.writesWaiting() })
		inFlight := log.last()
		for i := range 2 {
			k := fmt.Sprint("n", round, "-", i)
			m.put(t, c.s, k, fmt.Sprint("v", round))
			if slices.Contains(inFlight, cloak.Where(c.s, k)) {
				hit++
			}
		}
		f.gate.Store(nil)
		close(gate)
		<-done
		if round%2 == 1 {
			cloak.RunBatch(c.s) // makes the commit durable
		}
		c.crash()
		m.check(t, c.s, fmt.Sprint("round ", round))
		for k := range m { // room for the next round's inserts
			m.del(t, c.s, k)
		}
		drain(t, c.s)
		log.addrs.Store(nil)
	}
	if hit < 4 {
		t.Fatalf("only %d inserts took an address of the batch in flight", hit)
	}
}

// observeReads remembers the addresses of the last batch Read.
type observeReads struct {
	addrs atomic.Pointer[[]string]
}

func (o *observeReads) wrap(b backend.Backend) backend.Backend { return &readLog{b, o} }

func (o *observeReads) last() []string {
	if p := o.addrs.Load(); p != nil {
		return *p
	}
	return nil
}

type readLog struct {
	backend.Backend
	o *observeReads
}

func (r *readLog) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if len(addrs) > 1 {
		a := slices.Clone(addrs)
		r.o.addrs.Store(&a)
	}
	return r.Backend.Read(ctx, addrs)
}

// TestCrashDuringLoad: a bulk load cut short by a crash, whether in its
// layout writes or after them but before its checkpoint, leaves an empty
// store that works; a load that returned is kept.
func TestCrashDuringLoad(t *testing.T) {
	items := func(yield func(string, []byte) bool) {
		for i := range 10 {
			if !yield(fmt.Sprint("k", i), []byte(fmt.Sprint("v", i))) {
				return
			}
		}
	}
	for _, cut := range []struct {
		name string
		arm  func(f *faulty)
	}{
		{"a layout write", func(f *faulty) { f.failNth.Store(3) }},
		{"the checkpoint", func(f *faulty) { f.failAnchor.Store(true) }},
	} {
		t.Run(cut.name, func(t *testing.T) {
			f := &faulty{Backend: mem.New()}
			c := newCrashable(t, f)
			cut.arm(f)
			if _, err := c.s.(kv.Loader).Load(t.Context(), items); err == nil {
				t.Fatal("a load whose writes failed succeeded")
			}
			if err := c.s.Put(t.Context(), "k0", []byte("x")); err == nil {
				t.Fatal("a store whose load failed took a write")
			}
			f.failAnchor.Store(false)
			c.crash()
			m := model{"k0": "", "k9": ""}
			m.check(t, c.s, "after a load cut short")
			m.put(t, c.s, "k0", "after")
			drain(t, c.s)
			c.crash()
			m.check(t, c.s, "after a load cut short and a crash")
		})
	}
	t.Run("complete", func(t *testing.T) {
		c := newCrashable(t, mem.New())
		if _, err := c.s.(kv.Loader).Load(t.Context(), items); err != nil {
			t.Fatal(err)
		}
		c.crash()
		m := model{}
		for i := range 10 {
			m[fmt.Sprint("k", i)] = fmt.Sprint("v", i)
		}
		m.check(t, c.s, "after a load and a crash")
	})
}

// A power cut loses none of the acknowledged writes: storage drops every
// write-back it had not synced, and recovery writes them again from the
// journal.
func TestPowerLoss(t *testing.T) {
	kvtest.CheckPowerLoss(t, cloak.OpenRaw, kv.Env{Capacity: 64, ValueSize: 16, MaxKeySize: 8,
		Options: cloak.Options{Delta: 2 * time.Millisecond}})
}

// metaFails fails the write of a new store's metadata record, noting
// in early whether the store's batches had started by then (its ticker
// set on clock), as they must not have.
type metaFails struct {
	backend.Backend
	clock cloak.FakeClock
	early *atomic.Bool
}

func (m metaFails) Write(ctx context.Context, items []backend.Item) error {
	if len(items) > 0 && items[0].Addr == kv.MetaAddr {
		m.early.Store(m.clock.Ticking())
		return errInjected
	}
	return m.Backend.Write(ctx, items)
}

// A creation cut short before the store is committed (its metadata
// written) leaves no batch in its journal, so the next start builds the
// store afresh instead of refusing the journal as another store's.
func TestCreationCutShort(t *testing.T) {
	m, early, opts := mem.New(), &atomic.Bool{}, cloak.Options{Delta: time.Millisecond}
	fake, clock := cloak.OnFakeClock(opts)
	cfg := kv.Config{Protocol: "cloak", Backend: metaFails{m, clock, early}, Keys: kvtest.NewKeys(t), Capacity: 64, ValueSize: 16,
		MaxKeySize: 8, OpenJournal: kvtest.Journal(t.TempDir()), Options: fake}
	if s, err := kv.Open(t.Context(), cfg); err == nil {
		s.Close()
		t.Fatal("a creation whose metadata write failed opened")
	}
	if early.Load() {
		t.Fatal("the batches started before the store's metadata was written")
	}
	m.Reopen()
	cfg.Backend, cfg.Options = m, opts
	s, err := kv.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("the next start after a creation cut short: %v", err)
	}
	defer s.Close()
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := getByBatches(t, s, "k"); got != "v" {
		t.Fatalf("Get(k) = %q; want v", got)
	}
}

// openHeldSyncs opens a store on b whose batches run only by
// cloak.RunBatch, with a cache of one entry, journaled in a journal whose
// Syncs a test holds.
func openHeldSyncs(t *testing.T, b backend.Backend) (kv.Store, *durabletest.HeldSyncs) {
	keys := kvtest.NewKeys(t)
	j, err := journal.Open(t.TempDir(), keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := durabletest.NewHeldSyncs(j)
	s, err := cloak.OpenRaw(t.Context(), kv.Env{Backend: b, Keys: keys, Capacity: 16, ValueSize: 8, MaxKeySize: 8,
		Fresh: true, Journal: h, Options: cloak.Options{Delta: time.Hour, Cache: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		j.Close()
	})
	t.Cleanup(h.ReleaseAll) // first: a test that failed leaves Syncs held
	return s, h
}

// heldBy waits until n more Syncs are held, failing if done answers
// before: what answered did not wait for the journal.
func heldBy(t *testing.T, h *durabletest.HeldSyncs, done <-chan string, n int) {
	t.Helper()
	for range n {
		select {
		case v := <-done:
			t.Fatalf("%s answered before the journal was durable", v)
		case <-h.Held:
		case <-time.After(time.Minute):
			t.Fatal("no Sync came")
		}
	}
}

// named forwards c's answer to replies as "name: answer".
func named(replies chan<- string, name string, c <-chan string) {
	go func() { replies <- name + ": " + <-c }()
}

// goPut writes key in a goroutine; the channel gets "ok" or the error.
func goPut(s kv.Store, key, val string) <-chan string {
	done := make(chan string, 1)
	go func() {
		if err := s.Put(context.Background(), key, []byte(val)); err != nil {
			done <- err.Error()
			return
		}
		done <- "ok"
	}()
	return done
}

// TestRepliesWaitForTheJournal: no reply leaves before the journal
// record of the write it shows is durable: a Put, a read answered from a
// write waiting for its batch (Algorithm 2, line 13), and a read that
// waited for a batch and is answered by a later write of its key (line
// 18).
func TestRepliesWaitForTheJournal(t *testing.T) {
	s, h := openHeldSyncs(t, mem.New())
	for _, k := range []string{"r", "x"} { // x evicts r from the cache
		if err := s.Put(t.Context(), k, []byte("old")); err != nil {
			t.Fatal(err)
		}
		drain(t, s)
	}
	replies := make(chan string, 4)
	named(replies, "Get(r)", goGet(s, "r"))
	kvtest.WaitFor(t, "the read of r to wait for a batch", func() bool { return kvtest.Stat(t, s.Stats(), "pending_keys") == 1 })

	h.Hold()
	named(replies, "Put(w)", goPut(s, "w", "new"))
	heldBy(t, h, replies, 1)
	named(replies, "Get(w)", goGet(s, "w"))
	heldBy(t, h, replies, 1)
	named(replies, "Put(r)", goPut(s, "r", "new-r")) // answers Get(r)
	heldBy(t, h, replies, 2)

	h.ReleaseAll()
	var got []string
	for range 4 {
		got = append(got, <-replies)
	}
	slices.Sort(got)
	if want := []string{"Get(r): new-r", "Get(w): new", "Put(r): ok", "Put(w): ok"}; !slices.Equal(got, want) {
		t.Errorf("replies %q; want %q", got, want)
	}
}

// TestStorageWaitsForTheJournal: a batch's Read is issued only once its
// record is durable, and its Write only once its write-back record is.
func TestStorageWaitsForTheJournal(t *testing.T) {
	f := &faulty{Backend: mem.New()}
	s, h := openHeldSyncs(t, f)
	for i := range 4 {
		if err := s.Put(t.Context(), fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	f.calls = []string{}
	f.mu.Unlock()
	calls := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Clone(f.calls)
	}
	ops := func() string {
		var o []string
		for _, c := range calls() {
			o = append(o, strings.Fields(c)[0])
		}
		return strings.Join(o, " ")
	}
	h.Hold()
	done := make(chan string, 1)
	go func() { cloak.RunBatch(s); cloak.RunBatch(s); done <- "the batches" }()
	for _, step := range []struct{ before, want string }{
		{"the first batch's Read", ""},
		{"its Write", "read"},
		{"the next batch's Read", "read write"},
		{"the next batch's Write", "read write read"},
	} {
		heldBy(t, h, done, 1)
		if got := ops(); got != step.want {
			t.Fatalf("storage saw %q before the Sync before %s returned; want %q", got, step.before, step.want)
		}
		if step.want == "read write read" {
			h.ReleaseAll()
		} else {
			h.Release()
		}
	}
	<-done
	if got := ops(); got != "read write read write" {
		t.Fatalf("storage saw %q; want two batches, each a Read and a Write", got)
	}
}
