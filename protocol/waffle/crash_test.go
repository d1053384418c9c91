package waffle

import (
	"bytes"
	"cmp"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
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
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/seal"
)

// crashOpts are small parameters for capacity 64: C = 12, D = 32.
var crashOpts = Options{B: 10, R: 4, FD: 2, Timeout: 100 * time.Microsecond}

// rawStore opens a waffle store of capacity 64 on b with its own journal
// in dir, so a test can crash it (crash).
func rawStore(t *testing.T, b backend.Backend, keys *seal.Keys, dir string, fresh bool) (*store, *journal.Journal) {
	t.Helper()
	j, err := journal.Open(dir, keys, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := open(t.Context(), kv.Env{Backend: b, Keys: keys, Capacity: 64, ValueSize: 16, Fresh: fresh, Journal: j, Options: crashOpts})
	if err != nil {
		j.Crash()
		t.Fatal(err)
	}
	return s, j
}

// crash stops s as the death of its process would: batching stops,
// nothing is saved, the journal keeps what was synced and storage what it
// received.
func crash(s *store, j *journal.Journal) {
	close(s.stop)
	<-s.loopDone
	j.Crash()
}

// closeRaw closes a store rawStore opened.
func closeRaw(t *testing.T, s *store, j *journal.Journal) {
	t.Helper()
	if err := errors.Join(s.Close(), j.Close()); err != nil {
		t.Fatal(err)
	}
}

// flaky is a backend whose calls of one kind can be made to fail, once.
type flaky struct {
	backend.Backend
	mu        sync.Mutex
	countdown map[callKind]int // the n-th next call of the kind fails
}

// callKind is a kind of call flaky can fail: a Read, Write or Delete of
// objects, or the write of the anchor.
type callKind string

const (
	objRead   callKind = "object read"
	objWrite  callKind = "object write"
	objDelete callKind = "object delete"
	anchor    callKind = "anchor write"
)

// failNth makes the n-th next call of kind k fail (1: the next).
func (f *flaky) failNth(k callKind, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.countdown == nil {
		f.countdown = map[callKind]int{}
	}
	f.countdown[k] = n
}

// fails counts a call of kind k, or of no kind when addr0, its first
// address, is not an object's (nor the anchor's).
func (f *flaky) fails(k callKind, addr0 string) error {
	switch {
	case k == objWrite && addr0 == durable.AnchorAddr:
		k = anchor
	case !strings.HasPrefix(addr0, ObjectPrefix):
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.countdown[k] == 0 {
		return nil
	}
	f.countdown[k]--
	if f.countdown[k] > 0 {
		return nil
	}
	return fmt.Errorf("injected %s failure", k)
}

func (f *flaky) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if err := f.fails(objRead, addrs[0]); err != nil {
		return nil, err
	}
	return f.Backend.Read(ctx, addrs)
}

func (f *flaky) Write(ctx context.Context, items []backend.Item) error {
	if err := f.fails(objWrite, items[0].Addr); err != nil {
		return err
	}
	return f.Backend.Write(ctx, items)
}

// WriteFenced is taken as Write is: the store fences only the anchor.
func (f *flaky) WriteFenced(ctx context.Context, fence backend.Fence, items []backend.Item) error {
	if err := f.fails(objWrite, items[0].Addr); err != nil {
		return err
	}
	return f.Backend.WriteFenced(ctx, fence, items)
}

func (f *flaky) Delete(ctx context.Context, addrs []string) error {
	if err := f.fails(objDelete, addrs[0]); err != nil {
		return err
	}
	return f.Backend.Delete(ctx, addrs)
}

// stateOf is s's whole state, objects sorted, for comparisons.
func stateOf(t *testing.T, s *store) state {
	t.Helper()
	s.mu.Lock()
	b, err := s.Snapshot()
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var st state
	if err := gob.NewDecoder(bytes.NewReader(b[len(stateMagic):])).Decode(&st); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(st.Objects, func(a, b objectState) int {
		if a.Dummy != b.Dummy { // real objects first
			if a.Dummy {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return st
}

// checkStorage requires storage to hold exactly the objects the state
// places on it.
func checkStorage(t *testing.T, s *store, b backend.Backend) {
	t.Helper()
	s.mu.Lock()
	want := s.storedAddrs()
	s.mu.Unlock()
	var got []string
	if err := b.Scan(t.Context(), ObjectPrefix, func(a string) error { got = append(got, a); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("storage holds %d objects, the state places %d there (or other ones)", len(got), len(want))
	}
}

// A crash loses nothing acknowledged and recovers the proxy's exact state:
// the batches since the last checkpoint are replayed from the journal,
// across several crashes and checkpoints; a batch whose write-back failed
// after its record was journaled is written back at recovery; a batch
// whose Read failed after its reads were journaled is run again at
// recovery on the same addresses, listed in the same order, and its
// requests have no effect.
func TestCrashRecovers(t *testing.T) {
	ctx := t.Context()
	fb := &flaky{Backend: mem.New()}
	var log observe.MemoryLog
	b := observe.NewTap(fb, &log)
	keys, dir := kvtest.NewKeys(t), t.TempDir()
	s, j := rawStore(t, b, keys, dir, true)
	want := kvtest.Model{}
	restart := func(what string, same bool) {
		t.Helper()
		before := stateOf(t, s)
		crash(s, j)
		s, j = rawStore(t, b, keys, dir, false)
		if after := stateOf(t, s); same && !reflect.DeepEqual(after, before) {
			t.Fatalf("%s: the recovered state differs from the state at the crash", what)
		}
		checkStorage(t, s, b)
		want.Check(t, s, what)
	}

	want.Put(t, s, "deleted", "x")
	for i := range 20 {
		want.Put(t, s, fmt.Sprint("k", i), fmt.Sprint("v", i))
	}
	want.Delete(t, s, "deleted")
	restart("first crash", true)

	s.mu.Lock()
	s.log.SetEvery(5) // a checkpoint every 5 records from here
	s.mu.Unlock()
	for i := range 12 {
		want.Put(t, s, fmt.Sprint("k", i), fmt.Sprint("w", i))
	}
	if n := j.Stats().Checkpoints; n < 2 {
		t.Fatalf("%d checkpoints in 12 batches at one every 5 records; want several", n)
	}
	// A batch whose Write fails after its record is durable: its effect is
	// kept, and its Write redone at recovery.
	fb.failNth(objWrite, 1)
	if err := s.Put(ctx, "k0", []byte("redone")); err == nil {
		t.Fatal("a Put whose write-back failed succeeded")
	}
	want["k0"] = []byte("redone")
	restart("crash after a failed write-back", true)

	// A batch whose Read fails: recovery reads the same addresses again.
	fb.failNth(objRead, 1)
	if err := s.Put(ctx, "k1", []byte("never")); err == nil {
		t.Fatal("a Put whose Read failed succeeded")
	}
	recs := log.Records()
	failed := recs[len(recs)-1]
	if failed.Op != observe.OpRead || !failed.Err {
		t.Fatalf("the last call is %v (failed %v); want the failed Read", failed.Op, failed.Err)
	}
	restart("crash after a failed Read", false)
	var again *observe.Record
	for _, r := range log.Records()[len(recs):] {
		if r.Op == observe.OpRead && r.Addrs[0] != kv.MetaAddr && len(r.Addrs) > 1 {
			again = &r
			break
		}
	}
	if again == nil || !slices.Equal(again.Addrs, failed.Addrs) {
		t.Fatal("the first batch after recovery does not read the failed batch's addresses in their order")
	}
	closeRaw(t, s, j)
}

// Replay rebuilds exactly the state the proxy had, after concurrent
// clients' inserts, overwrites, deletes and misses, in chained batches.
func TestRecoveredStateExact(t *testing.T) {
	for round := range 4 {
		b := mem.New()
		keys, dir := kvtest.NewKeys(t), t.TempDir()
		s, j := rawStore(t, b, keys, dir, true)
		var wg sync.WaitGroup
		for c := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(round), uint64(c)))
				for seq := range 40 {
					k := fmt.Sprintf("c%d/%d", c, r.IntN(3))
					var err error
					switch r.IntN(4) {
					case 0:
						err = s.Delete(t.Context(), k)
					case 1:
						_, _, err = s.Get(t.Context(), k)
					default:
						err = s.Put(t.Context(), k, []byte(fmt.Sprint(seq)))
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		before := stateOf(t, s)
		crash(s, j)
		s, j = rawStore(t, b, keys, dir, false)
		if after := stateOf(t, s); !reflect.DeepEqual(after, before) {
			t.Fatalf("round %d: the recovered state differs from the state at the crash", round)
		}
		checkStorage(t, s, b)
		closeRaw(t, s, j)
	}
}

// A failed Read is retried on the same addresses, in the same order, by
// the next batch, whose own requests then run: a batch's reads never
// change once storage may have seen them.
func TestFailedReadRetried(t *testing.T) {
	ctx := t.Context()
	fb := &flaky{Backend: mem.New()}
	var log observe.MemoryLog
	b := observe.NewTap(fb, &log)
	s, j := rawStore(t, b, kvtest.NewKeys(t), t.TempDir(), true)
	defer closeRaw(t, s, j)
	if err := s.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	fb.failNth(objRead, 1)
	if err := s.Put(ctx, "a", []byte("2")); err == nil {
		t.Fatal("a Put whose Read failed succeeded")
	}
	n := len(log.Records())
	failed := log.Records()[n-1]
	got, ok, err := s.Get(ctx, "a")
	if err != nil || !ok || string(got) != "1" {
		t.Fatalf("Get after a failed Put = %q, %v, %v; want the value before it", got, ok, err)
	}
	next := log.Records()[n:]
	if len(next) != 6 || !slices.Equal(next[0].Addrs, failed.Addrs) {
		t.Fatalf("after a failed Read, %d calls; want the failed batch's Read again, then the next batch", len(next))
	}
	checkStorage(t, s, b)
}

// A bulk load cut short leaves a store that opens and works: before its
// objects are all written (the previous layout stays), after they are but
// before its checkpoint (likewise), and after its checkpoint but before
// the previous layout is deleted (recovery deletes it).
func TestCrashDuringLoad(t *testing.T) {
	items := func(yield func(string, []byte) bool) {
		for i := range 40 {
			if !yield(fmt.Sprint("load", i), []byte(fmt.Sprint(i))) {
				return
			}
		}
	}
	for _, c := range []struct {
		name   string
		fail   callKind
		loaded bool // the load took effect
	}{
		{"objects", objWrite, false},
		{"checkpoint", anchor, false},
		{"old layout", objDelete, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			fb := &flaky{Backend: mem.New()}
			keys, dir := kvtest.NewKeys(t), t.TempDir()
			s, j := rawStore(t, fb, keys, dir, true)
			fb.failNth(c.fail, 1)
			_, err := s.Load(ctx, items)
			if (err == nil) != c.loaded {
				t.Fatalf("Load: %v", err)
			}
			crash(s, j)
			s, j = rawStore(t, fb, keys, dir, false)
			defer closeRaw(t, s, j)
			got, ok, err := s.Get(ctx, "load7")
			if err != nil || ok != c.loaded || (ok && string(got) != "7") {
				t.Fatalf("Get after an interrupted load = %q, %v, %v; want loaded %v", got, ok, err, c.loaded)
			}
			if c.name != "checkpoint" { // that one leaves the loaded objects behind
				checkStorage(t, s, fb)
			}
			if !c.loaded {
				if n, err := s.Load(ctx, items); err != nil || n != 40 {
					t.Fatalf("Load again = %d, %v", n, err)
				}
			}
			if err := s.Put(ctx, "b", []byte("2")); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := s.Get(ctx, "load7"); err != nil || !ok || string(got) != "7" {
				t.Fatalf("Get after the load = %q, %v, %v", got, ok, err)
			}
		})
	}
}

// freezer is a backend whose at-th call never completes, as if the
// process died in it: it blocks until thaw is closed, then fails, and so
// does every later call.
type freezer struct {
	backend.Backend
	at           int64
	calls        atomic.Int64
	dead         atomic.Bool
	frozen, thaw chan struct{}
}

var errDead = errors.New("the process is dead")

func (f *freezer) enter() error {
	if f.dead.Load() {
		return errDead
	}
	if f.calls.Add(1) == f.at {
		f.dead.Store(true)
		close(f.frozen)
		<-f.thaw
		return errDead
	}
	return nil
}

func (f *freezer) Read(ctx context.Context, addrs []string) ([][]byte, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	return f.Backend.Read(ctx, addrs)
}

func (f *freezer) Write(ctx context.Context, items []backend.Item) error {
	if err := f.enter(); err != nil {
		return err
	}
	return f.Backend.Write(ctx, items)
}

func (f *freezer) Delete(ctx context.Context, addrs []string) error {
	if err := f.enter(); err != nil {
		return err
	}
	return f.Backend.Delete(ctx, addrs)
}

// A crash at any backend call under concurrent clients (batches chained
// in one group commit, checkpoints every few records) loses no
// acknowledged request: each key reads back as its owner's last
// acknowledged operation left it, or as the one in flight at the crash
// did; storage holds exactly the objects the recovered state places
// there; and no object is read by two different Reads (a batch's reads
// never change once storage may have seen them).
func TestCrashUnderLoad(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 12 {
		base := mem.New()
		f := &freezer{Backend: base, at: 10 + r.Int64N(400), frozen: make(chan struct{}), thaw: make(chan struct{})}
		keys, dir := kvtest.NewKeys(t), t.TempDir()
		var before, after observe.MemoryLog
		s, j := rawStore(t, observe.NewTap(f, &before), keys, dir, true)
		s.mu.Lock()
		s.log.SetEvery(7)
		s.mu.Unlock()
		const clients, perClient = 16, 3
		type keyState struct {
			acked, inflight string // "" is deleted (or never written)
			busy            bool
		}
		states := make([][perClient]keyState, clients)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				cr := rand.New(rand.NewPCG(uint64(round), uint64(c)))
				for seq := 0; ; seq++ {
					i := cr.IntN(perClient)
					k, v := fmt.Sprintf("c%d/%d", c, i), fmt.Sprint("v", seq)
					st := &states[c][i]
					var err error
					switch cr.IntN(4) {
					case 0:
						st.inflight, st.busy = "", true
						err = s.Delete(ctx, k)
					case 1:
						_, _, err = s.Get(ctx, k)
					default:
						st.inflight, st.busy = v, true
						err = s.Put(ctx, k, []byte(v))
					}
					if err != nil {
						return // the crash
					}
					if st.busy {
						st.acked, st.busy = st.inflight, false
					}
				}
			})
		}
		<-f.frozen
		j.Crash()
		cancel()
		wg.Wait()
		close(f.thaw)
		close(s.stop)
		<-s.loopDone

		s, j = rawStore(t, observe.NewTap(base, &after), keys, dir, false)
		checkStorage(t, s, base)
		for c := range clients {
			for i, st := range states[c] {
				k := fmt.Sprintf("c%d/%d", c, i)
				got, ok, err := s.Get(t.Context(), k)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					got = nil
				}
				if string(got) != st.acked && !(st.busy && string(got) == st.inflight) {
					t.Fatalf("round %d (crash at call %d): Get(%q) = %q, %v; want %q (or %q in flight: %v)",
						round, f.at, k, got, ok, st.acked, st.inflight, st.busy)
				}
			}
		}
		seen := before.Records()
		for i, rec := range seen {
			if rec.Err { // the call the process died in; none after it happened
				seen = seen[:i+1]
				break
			}
		}
		checkReads(t, append(seen, after.Records()...))
		closeRaw(t, s, j)
	}
}

// checkReads requires every object read more than once in recs to be read
// by the same Read each time: the same addresses, in the same order.
func checkReads(t *testing.T, recs []observe.Record) {
	t.Helper()
	by := map[string][]string{}
	for _, rec := range recs {
		if rec.Op != observe.OpRead || !strings.HasPrefix(rec.Addrs[0], ObjectPrefix) {
			continue
		}
		for _, a := range rec.Addrs {
			if prev, ok := by[a]; ok && !slices.Equal(prev, rec.Addrs) {
				t.Fatalf("call %d reads an object an earlier Read of other objects read", rec.Seq)
			}
			by[a] = rec.Addrs
		}
	}
}

// A checkpoint that fails (here its anchor write) is counted, keeps the
// journal whole and is tried again after the next batch; the store keeps
// serving and a crash after it loses nothing.
func TestCheckpointFailureCounted(t *testing.T) {
	ctx := t.Context()
	fb := &flaky{Backend: mem.New()}
	keys, dir := kvtest.NewKeys(t), t.TempDir()
	s, j := rawStore(t, fb, keys, dir, true)
	s.mu.Lock()
	s.log.SetEvery(2)
	s.mu.Unlock()
	fb.failNth(anchor, 1)
	for i := range 6 {
		if err := s.Put(ctx, fmt.Sprint("k", i), []byte(fmt.Sprint("v", i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := kvtest.Stat(t, s.Stats(), "checkpoint_errors"); got != 1 {
		t.Fatalf("checkpoint_errors = %v; want 1", got)
	}
	if j.Stats().Checkpoints == 0 {
		t.Fatal("no checkpoint succeeded after the failed one")
	}
	crash(s, j)
	s, j = rawStore(t, fb, keys, dir, false)
	for i := range 6 {
		if got, ok, err := s.Get(ctx, fmt.Sprint("k", i)); err != nil || !ok || string(got) != fmt.Sprint("v", i) {
			t.Fatalf("after the crash, Get(k%d) = %q, %v, %v", i, got, ok, err)
		}
	}
	closeRaw(t, s, j)
}

// TestPowerLoss: with storage syncing only at checkpoints, a power cut
// loses nothing acknowledged (the journal redoes what storage lost).
func TestPowerLoss(t *testing.T) {
	kvtest.CheckPowerLoss(t, func(ctx context.Context, env kv.Env) (kv.Store, error) { return open(ctx, env) },
		kv.Env{Capacity: 64, ValueSize: 16, Options: crashOpts})
}
