package pathoram

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// queueSignal, once armed, is told each time an operation takes its
// place in the store's order (TestingKnobs.Queued): the operation hands
// it a channel and waits until the test closes it.
type queueSignal struct {
	armed atomic.Bool
	c     chan chan struct{}
}

func newQueueSignal() *queueSignal { return &queueSignal{c: make(chan chan struct{})} }

func (q *queueSignal) hook() {
	if q.armed.Load() {
		proceed := make(chan struct{})
		q.c <- proceed
		<-proceed
	}
}

// queueDepth is how many operations inOrder keeps in flight.
const queueDepth = 6

// inOrder runs op(i) for i in [from, to), up to queueDepth at once, in
// that order in the store: each starts once the one before has its
// place, and goes on only once the one after has its own. So every
// access but the last finds the next queued behind it when it writes
// back, and journals that access's path read with its own write-back
// (group commit). It returns the first error.
func (q *queueSignal) inOrder(from, to int, op func(i int) error) error {
	q.armed.Store(true)
	defer q.armed.Store(false)
	slots, errs := make(chan struct{}, queueDepth), make(chan error, to-from)
	var wg sync.WaitGroup
	var last chan struct{} // the operation placed last, waiting for the next
	for i := from; i < to; i++ {
		slots <- struct{}{}
		wg.Add(1)
		ended := make(chan struct{})
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer close(ended)
			if err := op(i); err != nil {
				errs <- fmt.Errorf("op %d: %w", i, err)
			}
		}()
		select {
		case placed := <-q.c:
			if last != nil {
				close(last)
			}
			last = placed
		case <-ended: // ended without a place, with an error
		}
	}
	if last != nil {
		close(last)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// heldStore is a journaled store on memory storage recorded by a Tap,
// with its journal watched and its operations' order signalled.
type heldStore struct {
	s      *store
	j      *durabletest.HeldSyncs
	raw    *journal.Journal
	log    *observe.MemoryLog
	q      *queueSignal
	traced []plannedRead // every path read planned, in order
}

// openHeld opens (fresh, or recovers) a store of 64 keys of 16 bytes on
// b, its journal in dir.
func openHeld(t *testing.T, b backend.Backend, keys *seal.Keys, dir string, fresh bool) *heldStore {
	t.Helper()
	return openLeaky(t, b, keys, dir, fresh, noLeak)
}

// openLeaky is openHeld with leak lk injected.
func openLeaky(t *testing.T, b backend.Backend, keys *seal.Keys, dir string, fresh bool, lk leak) *heldStore {
	t.Helper()
	raw, err := journal.Open(dir, keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &heldStore{j: durabletest.NewHeldSyncs(raw), raw: raw, log: &observe.MemoryLog{}, q: newQueueSignal()}
	opts := Options{TestingKnobs: TestingKnobs{Seed: &[32]byte{3}, Leak: lk, Queued: h.q.hook, Trace: func(leaf uint64, id tree.BlockID) {
		h.traced = append(h.traced, plannedRead{id: id, leaf: leaf})
	}}}
	st, err := open(t.Context(), kv.Env{Backend: observe.NewTap(b, h.log), Keys: keys, Capacity: 64, ValueSize: 16,
		Fresh: fresh, Journal: h.j, Options: opts})
	if err != nil {
		raw.Crash()
		t.Fatal(err)
	}
	h.s = st.(*store)
	return h
}

// start starts op and returns its outcome's channel once op has its
// place in the store's order.
func (h *heldStore) start(op func(ctx context.Context) error) <-chan error {
	done := make(chan error, 1)
	h.q.armed.Store(true)
	go func() { done <- op(context.Background()) }()
	close(<-h.q.c)
	h.q.armed.Store(false)
	return done
}

// goPut starts a Put (start).
func (h *heldStore) goPut(key, val string) <-chan error {
	return h.start(func(ctx context.Context) error { return h.s.Put(ctx, key, []byte(val)) })
}

// goGet starts a Get (start).
func (h *heldStore) goGet(key string) <-chan error {
	return h.start(func(ctx context.Context) error { _, _, err := h.s.Get(ctx, key); return err })
}

// awaitSync waits for the next held Sync; an operation of ops ending
// first fails the test.
func (h *heldStore) awaitSync(t *testing.T, what string, ops ...<-chan error) {
	t.Helper()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(h.j.Held)}}
	for _, op := range ops {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(op)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(syncWait))})
	switch i, v, _ := reflect.Select(cases); {
	case i == len(cases)-1:
		t.Fatalf("%s: no journal Sync came within %v", what, syncWait)
	case i > 0:
		t.Fatalf("%s: operation %d returned (%v) before its journal record was synced", what, i-1, v)
	}
}

// syncWait bounds awaitSync's wait: far beyond any Sync's, so that a
// store that never asks for the one awaited fails instead of hanging.
const syncWait = time.Minute

// pending fails the test if an operation of ops has returned.
func pending(t *testing.T, what string, ops ...<-chan error) {
	t.Helper()
	for i, op := range ops {
		select {
		case err := <-op:
			t.Fatalf("%s: operation %d returned (%v) while its journal record's Sync was held", what, i, err)
		default:
		}
	}
}

// lastCall is the last call storage saw.
func (h *heldStore) lastCall() observe.Record {
	recs := h.log.Records()
	if len(recs) == 0 {
		return observe.Record{}
	}
	return recs[len(recs)-1]
}

// TestAcknowledgedOnlyWhenDurable holds the journal's Syncs: no Put
// returns, and storage sees no write-back, until the Sync of the record
// that makes it durable is released. A Put queued behind another has its
// path read journaled with the other's write-back, in the same Sync: once
// it is released, the queued Put reads, and only then is the other's
// write-back issued, while its own record waits for the next Sync.
func TestAcknowledgedOnlyWhenDurable(t *testing.T) {
	h := openHeld(t, mem.New(), kvtest.NewKeys(t), t.TempDir(), true)
	t.Cleanup(func() { h.j.ReleaseAll(); h.s.Close(); h.raw.Close() })
	h.j.Hold()
	calls := len(h.log.Records())
	a := h.goPut("a", "1")
	h.awaitSync(t, "a's read planned", a) // the store was idle: a journals its own read
	if len(h.log.Records()) != calls {
		t.Fatal("storage saw a's path read before its plan was synced")
	}
	b := h.goPut("b", "2") // queued behind a
	h.j.Release()
	// a hands its write-back to b; both ask for the Sync of a's record
	// and b's read planned with it.
	h.awaitSync(t, "a's write-back and b's read planned", a, b)
	h.awaitSync(t, "a's write-back and b's read planned, asked again", a, b)
	if c := h.lastCall(); c.Op != observe.OpRead {
		t.Fatalf("storage saw a %v before a's write-back was synced; want a's path read last", c.Op)
	}
	pending(t, "a's write-back", a, b)
	h.j.Release()
	h.j.Release()
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	h.awaitSync(t, "b's write-back", b)
	recs := h.log.Records()
	if n := len(recs); n < 3 || recs[n-3].Op != observe.OpRead || recs[n-2].Op != observe.OpRead ||
		recs[n-1].Op != observe.OpWrite || !slices.Equal(recs[n-1].Addrs, recs[n-3].Addrs) {
		t.Fatal("before b's write-back was synced, storage did not see a's read, b's read, then a's write-back, last")
	}
	pending(t, "b's write-back", b)
	h.j.ReleaseAll()
	if err := <-b; err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"a": "1", "b": "2"} {
		if got, ok, err := h.s.Get(t.Context(), k); err != nil || !ok || string(got) != v {
			t.Fatalf("Get(%s) = %q, %v, %v", k, got, ok, err)
		}
	}
}

// failBeforeRead is storage whose next Read, once armed, crashes the
// journal and fails without reaching storage.
type failBeforeRead struct {
	backend.Backend
	crash atomic.Pointer[journal.Journal]
}

func (b *failBeforeRead) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if j := b.crash.Swap(nil); j != nil {
		j.Crash()
		return nil, errors.New("injected: the process died before this Read")
	}
	return b.Backend.Read(ctx, addrs)
}

// TestCrashAroundReadPlannedAhead: the process dies after an access's
// write-back and the next access's path read, planned ahead with it, are
// durable: before that read reaches storage, after storage served it, or
// before it with a checkpoint between (which keeps the planned read after
// it). Recovery reads that path once and writes it back with the block
// moved; the key's next access reads another path, and nothing
// acknowledged is lost. Without checkpoints, the first access hands its
// write-back to the second, which issues it after its read: a crash
// after the read leaves the first unacknowledged, and recovery redoes
// its write-back from its record.
func TestCrashAroundReadPlannedAhead(t *testing.T) {
	for _, tc := range []struct {
		name       string
		served     bool // storage served the read before the crash
		checkpoint bool // a checkpoint after every access
	}{
		{"before the read", false, false},
		{"after the read", true, false},
		{"after a checkpoint, before the read", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, dir, m := kvtest.NewKeys(t), t.TempDir(), mem.New()
			cut := &durabletest.CutAfterRead{Backend: m}
			fb := &failBeforeRead{Backend: cut}
			h := openHeld(t, fb, keys, dir, true)
			for i := range 10 {
				if err := h.s.Put(t.Context(), fmt.Sprint("k", i), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			if tc.checkpoint {
				h.s.log.SetEvery(1)
			}
			h.j.Hold()
			a := h.goPut("k1", "w")
			h.awaitSync(t, "a's read planned", a)
			b := h.goGet("k3")
			h.j.Release()
			h.awaitSync(t, "a's write-back and b's read planned", a, b)
			asked := 1
			if !tc.checkpoint { // a handed its write-back to b: both ask
				h.awaitSync(t, "a's write-back and b's read planned, asked again", a, b)
				asked++
			}
			h.j.StopHolding()
			if tc.served {
				cut.Crash(h.raw)
			} else {
				fb.crash.Store(h.raw)
			}
			for range asked {
				h.j.Release()
			}
			if err := <-a; err != nil && !tc.served {
				t.Fatal(err)
			}
			if err := <-b; err == nil {
				t.Fatal("a Get cut short by a crash succeeded")
			}
			planned := h.traced[len(h.traced)-1]
			layout := tree.Layout{Prefix: treePrefix}
			v := durabletest.MidRead{Prefix: treePrefix, Cut: observe.Record{Op: observe.OpRead}}
			for _, bucket := range tree.NewGeometry(64).Path(planned.leaf, nil) {
				v.Cut.Addrs = append(v.Cut.Addrs, layout.Addr(bucket))
			}
			h.s.Close()
			m.Reopen()
			h = openHeld(t, m, keys, dir, false)
			t.Cleanup(func() { h.j.ReleaseAll(); h.s.Close(); h.raw.Close() })
			v.Recovery = h.log.Records()
			for i := range 10 {
				from, want := len(h.log.Records()), map[bool]string{true: "w", false: "v"}[i == 1]
				if got, ok, err := h.s.Get(t.Context(), fmt.Sprint("k", i)); err != nil || !ok || string(got) != want {
					t.Fatalf("Get(k%d) after recovery = %q, %v, %v; want %q", i, got, ok, err, want)
				}
				if i == 3 {
					v.Next = slices.Clone(h.log.Records()[from:])
				}
			}
			if err := v.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCrashWithTwoReadsUnfinished: three Puts queued, the first journals
// the next two's path reads with its write-back; the second reads, hands
// its write-back to the third, and the process dies once storage has
// served the third's read, before the second's record is durable. Both
// reads are unfinished: recovery reads each path once more, in order,
// and writes it back; the first Put is kept, and neither key's next
// access reads the path storage saw read when the crash came. A recovery
// that keeps only the last unfinished read (leakRecoveryKeepsLastRead)
// leaves the second key's block on its path, and its next access reads
// it again.
func TestCrashWithTwoReadsUnfinished(t *testing.T) {
	for name, lk := range map[string]leak{"finished": noLeak, "one kept (leak)": leakRecoveryKeepsLastRead} {
		t.Run(name, func(t *testing.T) {
			err := crashWithTwoReadsUnfinished(t, lk)
			t.Logf("view: %v", err)
			if lk == noLeak && err != nil || lk != noLeak && !errors.Is(err, durabletest.ErrReadAgain) {
				t.Fatalf("view: %v", err)
			}
		})
	}
}

// crashWithTwoReadsUnfinished runs TestCrashWithTwoReadsUnfinished with
// leak lk in the recovered store, and returns what is wrong with
// storage's view of the recovery and of the keys' next accesses.
func crashWithTwoReadsUnfinished(t *testing.T, lk leak) error {
	keys, dir, m := kvtest.NewKeys(t), t.TempDir(), mem.New()
	cut := &durabletest.CutAfterRead{Backend: m}
	h := openHeld(t, cut, keys, dir, true)
	for i := range 10 {
		if err := h.s.Put(t.Context(), fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	h.j.Hold()
	a := h.goPut("k1", "a")
	h.awaitSync(t, "a's read planned", a)
	b := h.goPut("k3", "b")
	c := h.goPut("k5", "c")
	// a journals its record, then b's and c's reads: every Sync up to
	// those goes through, and the first after them, for b's record, is
	// held. The journal dies once storage has served a's, b's and c's
	// reads (b issues a's write-back between the last two).
	h.j.HoldAfter(h.raw.Last() + 3)
	cut.CrashAfter(3, h.raw)
	h.j.Release()
	// b hands its write-back to c, and both ask for the Sync of b's
	// record; c only once it has read, and the journal has died.
	h.awaitSync(t, "b's write-back", b, c)
	h.awaitSync(t, "b's write-back, asked again", b, c)
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	h.j.ReleaseAll()
	if err := <-b; err == nil {
		t.Fatal("a Put whose record a crash cut short succeeded")
	}
	if err := <-c; err == nil {
		t.Fatal("a Put cut short by a crash succeeded")
	}
	planned := h.traced[len(h.traced)-2:]
	if planned[0].id != tree.IDOf(keys, "k3") || planned[1].id != tree.IDOf(keys, "k5") {
		t.Fatal("the last two reads planned are not b's and c's")
	}
	layout, g := tree.Layout{Prefix: treePrefix}, tree.NewGeometry(64)
	pathOf := func(leaf uint64) []string { return layout.Addrs(g.Path(leaf, nil), nil) }
	h.s.Close()
	m.Reopen()
	h = openLeaky(t, m, keys, dir, false, lk)
	t.Cleanup(func() { h.j.ReleaseAll(); h.s.Close(); h.raw.Close() })
	var errs []error
	var reads [][]string
	for _, r := range h.log.Records() {
		if r.Op == observe.OpRead && strings.HasPrefix(r.Addrs[0], treePrefix) {
			reads = append(reads, r.Addrs)
		}
	}
	if len(reads) != 2 || !slices.Equal(reads[0], pathOf(planned[0].leaf)) || !slices.Equal(reads[1], pathOf(planned[1].leaf)) {
		errs = append(errs, fmt.Errorf("recovery made %d Reads of the tree; want b's path, then c's", len(reads)))
	}
	for i, k := range []string{"k3", "k5"} {
		from := len(h.log.Records())
		if _, _, err := h.s.Get(t.Context(), k); err != nil {
			t.Fatal(err)
		}
		for _, r := range h.log.Records()[from:] {
			if r.Op == observe.OpRead && slices.Equal(r.Addrs, pathOf(planned[i].leaf)) {
				errs = append(errs, fmt.Errorf("%s: %w", k, durabletest.ErrReadAgain))
			}
		}
	}
	if got, ok, err := h.s.Get(t.Context(), "k1"); err != nil || !ok || string(got) != "a" {
		t.Fatalf("Get(k1) after recovery = %q, %v, %v; want the acknowledged %q", got, ok, err, "a")
	}
	return errors.Join(errs...)
}

// TestOneKeyReadsPlannedAhead: three accesses to one key queued (two
// Puts, then a Get). The first journals the next two's reads with its
// write-back, the third's on the leaf the second moves the block to, so
// the third reads while the second's record is being synced, as an
// access to any other key would: when a read comes tells storage
// nothing of which keys follow one another. The Get returns the second
// Put's value.
func TestOneKeyReadsPlannedAhead(t *testing.T) {
	h := openHeld(t, mem.New(), kvtest.NewKeys(t), t.TempDir(), true)
	t.Cleanup(func() { h.j.ReleaseAll(); h.s.Close(); h.raw.Close() })
	if err := h.s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	h.j.Hold()
	a := h.goPut("k", "a")
	h.awaitSync(t, "a's read planned", a)
	b := h.goPut("k", "b")
	got := make(chan string, 1)
	c := h.start(func(ctx context.Context) error {
		v, _, err := h.s.Get(ctx, "k")
		got <- string(v)
		return err
	})
	reads := len(h.log.Records())
	h.j.HoldAfter(h.raw.Last() + 3) // a's record and b's and c's reads go through
	h.j.Release()
	h.awaitSync(t, "b's write-back", b, c)
	h.awaitSync(t, "b's write-back, asked again", b, c)
	var seen []observe.Record
	for _, r := range h.log.Records()[reads:] {
		if r.Op == observe.OpRead {
			seen = append(seen, r)
		}
	}
	planned := h.traced[len(h.traced)-1]
	want := tree.Layout{Prefix: treePrefix}.Addrs(tree.NewGeometry(64).Path(planned.leaf, nil), nil)
	if len(seen) != 3 || !slices.Equal(seen[2].Addrs, want) {
		t.Fatalf("with b's record not durable, storage saw %d path reads; want a's, b's and c's, on the leaf planned for c", len(seen))
	}
	h.j.ReleaseAll()
	for i, op := range []<-chan error{a, b, c} {
		if err := <-op; err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	if v := <-got; v != "b" {
		t.Fatalf("the Get returned %q; want the Put before it, %q", v, "b")
	}
}
