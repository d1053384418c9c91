package oblivistore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// usage is what the core holds against its semaphores at one moment.
type usage struct {
	EvictionCache int64 // blocks in trusted memory: being accessed or waiting for eviction
	StorageCache  int64 // blocks read early (or by dummy-exhausted reads) held in the storage cache
	Buffer        int64 // shuffling buffer held: a job's reservation until it is computed, its write after
	Early         int64 // early cache-ins outstanding (taken from the early cache-in semaphore)
	Evictions     int64 // evictions scheduled or due and not yet shuffled in
	IO            int64 // the shuffling I/O semaphore (at most ShuffleIOAhead; may go negative: shuffle.go's bypass)
}

// maxOf keeps the largest of each field of u and v.
func (u usage) maxOf(v usage) usage {
	return usage{max(u.EvictionCache, v.EvictionCache), max(u.StorageCache, v.StorageCache), max(u.Buffer, v.Buffer),
		max(u.Early, v.Early), max(u.Evictions, v.Evictions), max(u.IO, v.IO)}
}

// evictionCacheBound is the bound the tests state for the eviction cache:
// it is not semaphore-bounded, and the paper bounds it by O(sqrt N) with
// high probability; the accesses in flight add their blocks.
func evictionCacheBound(n int, o Options, clients int) int64 {
	return int64(o.EvictionsAhead + 8*int(math.Ceil(math.Sqrt(float64(n)))) + clients)
}

// checkUsage measures what c holds against its semaphores and checks the
// semaphores' accounting and that no message waits for an
// acknowledgement (unacknowledged): each of the early cache-in, shuffling buffer and
// eviction semaphores lies between 0 and its bound, and equals its bound
// less exactly what the state holds against it; the shuffling I/O
// semaphore stays at most its cap. o are the store's options (defaults
// filled in).
func checkUsage(c *Core, o Options) (usage, error) {
	front, sem := c.frontState(), c.Sems()
	groups := int64(len(c.groups))
	var u usage
	u.EvictionCache = int64(len(front.Mem))
	var maxBuffer int64
	for _, g := range c.groups {
		s := &g.st.Group
		for p := range s.Parts {
			for l := range s.Parts[p].Levels {
				lv := &s.Parts[p].Levels[l]
				u.StorageCache += int64(len(lv.Cached))
				u.Early += int64(lv.Early)
				if lv.Early < 0 {
					return u, fmt.Errorf("partition %d level %d counts %d early cache-ins", p, l, lv.Early)
				}
			}
			u.Evictions += s.Parts[p].J
		}
		for _, j := range s.Jobs {
			if j.Computed {
				u.Buffer += j.W
			} else {
				u.Buffer += j.Reserved
				u.Evictions += j.J
			}
		}
		maxBuffer += s.Counters.MaxBuffer
	}
	for _, r := range front.Active {
		if !r.ReadDone {
			u.Evictions += int64(r.Evictions)
		}
	}
	u.IO = sem.IO
	for _, sem := range []struct {
		name       string
		value, max int64
		held       int64
	}{
		{"early cache-in", sem.Early, int64(o.EarlyCacheIns), u.Early},
		{"shuffling buffer", sem.Buffer, groups * int64(o.ShufflingBuffer), u.Buffer},
		{"eviction", sem.Evictions, int64(o.EvictionsAhead), u.Evictions},
	} {
		switch {
		case sem.value < 0 || sem.value > sem.max:
			return u, fmt.Errorf("the %s semaphore is %d, outside [0, %d]", sem.name, sem.value, sem.max)
		case sem.value+sem.held != sem.max:
			return u, fmt.Errorf("the %s semaphore is %d with %d held against it; they should add up to its bound %d",
				sem.name, sem.value, sem.held, sem.max)
		}
	}
	if sem.IO > groups*int64(o.ShuffleIOAhead) { // it may go negative (shuffle.go's bypass), never above its cap
		return u, fmt.Errorf("the shuffling I/O semaphore is %d, above its cap %d", sem.IO, o.ShuffleIOAhead)
	}
	if n := unacknowledged(c); n != 0 {
		return u, fmt.Errorf("%d messages between the machines unacknowledged between two steps", n)
	}
	if maxBuffer > groups*int64(o.ShufflingBuffer) {
		return u, fmt.Errorf("shuffling_buffer_max %d exceeds the shuffling buffers %d", maxBuffer, groups*int64(o.ShufflingBuffer))
	}
	return u, nil
}

// unacknowledged counts the messages the core's machines hold for
// sending again: none between two steps, since in one process every
// message is delivered, and acknowledged, within the step that sent it.
func unacknowledged(c *Core) int {
	n := 0
	for _, o := range c.front.st.Out {
		n += len(o.Unacked)
	}
	for _, g := range c.groups {
		n += len(g.st.Out.Unacked)
	}
	return n
}

// TestCoreBoundsEveryStep drives the core alone, without a driver, at
// N = 2^12: a bulk load of N keys, then 10*N accesses (Zipf-hot and
// uniform keys, Gets, Puts and some Deletes) with up to 32 requests
// outstanding, every backend call completed in a random order (each step
// completes an I/O picked uniformly among those outstanding, so some wait
// long). After every Step the semaphores are checked (checkUsage) and the
// eviction cache against evictionCacheBound; every read must name the
// nonce its slot was last written under, and every reply must be the
// sequential answer in arrival order (the core answers in arrival order).
//
// It runs with the default options, and with tight ones that make every
// semaphore bind: the smallest shuffling buffer and early cache-in
// semaphore the options allow but a few, few evictions ahead, and one
// shuffling I/O per access, so the shuffler falls behind, levels being
// shuffled are read early, and requests wait on the semaphores.
func TestCoreBoundsEveryStep(t *testing.T) {
	const n = 1 << 12
	levels := topLevel(n, 64) + 1
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"defaults", Options{}},
		{"tight", Options{ShufflingBuffer: maxShuffleWrite(levels - 1), EarlyCacheIns: 2 * levels, EvictionsAhead: 8, ShuffleIOPerAccess: 1}},
	} {
		t.Run(c.name, func(t *testing.T) { coreBoundsEveryStep(t, n, c.o, c.name == "tight") })
	}
}

func coreBoundsEveryStep(t *testing.T, n int, o Options, bind bool) {
	const clients = 32
	accesses := 10 * n
	if testing.Short() && !bind { // the early cache-ins bind only late in a run
		accesses = n
	}
	o = o.EnsureDefaults(n)
	if err := o.Validate(n); err != nil {
		t.Fatal(err)
	}
	c := NewCore(n, o, [32]byte{7})
	disk := simStorage{}
	model := map[string]string{}
	writes, loaded, err := c.Load(func(yield func(string, []byte) bool) {
		for i := range n {
			k, v := fmt.Sprint("k", i), fmt.Sprint("k", i, ":v0")
			model[k] = v
			if !yield(k, []byte(v)) {
				return
			}
		}
	})
	if err != nil || loaded != n {
		t.Fatalf("Load = %d, %v", loaded, err)
	}
	for _, w := range writes {
		disk.write(w)
	}

	r := rand.New(rand.NewPCG(3, 4))
	zipf := rand.NewZipf(r, 1.2, 1, uint64(n-1))
	type want struct {
		val   string
		found bool
		get   bool
	}
	expect := map[uint64]want{} // by request sequence number
	var pending []Output        // backend calls issued, not completed
	var peak usage
	minIO := int64(math.MaxInt64)
	var steps, issued, answered int
	step := func(in Input) {
		t.Helper()
		outs, err := c.Step(in)
		if err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		steps++
		for _, out := range outs {
			switch {
			case out.Reply != nil:
				w, ok := expect[out.Reply.Seq]
				if !ok {
					t.Fatalf("reply to unknown request %d", out.Reply.Seq)
				}
				delete(expect, out.Reply.Seq)
				if w.get && (out.Reply.Result.Found != w.found || string(out.Reply.Result.Old) != w.val) {
					t.Fatalf("request %d: Get = %q, %v; want %q, %v", out.Reply.Seq, out.Reply.Result.Old, out.Reply.Result.Found, w.val, w.found)
				}
				answered++
			default:
				pending = append(pending, out)
			}
		}
		u, err := checkUsage(c, o)
		if err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		peak, minIO = peak.maxOf(u), min(minIO, u.IO)
		if bound := evictionCacheBound(n, o, clients); u.EvictionCache > bound {
			t.Fatalf("step %d: the eviction cache holds %d blocks, above the bound %d", steps, u.EvictionCache, bound)
		}
	}
	// complete carries out a backend call; every read must name the nonce
	// its slot was last written under.
	complete := func(out Output) {
		t.Helper()
		in, err := disk.complete(out)
		if err != nil {
			t.Fatal(err)
		}
		step(in)
	}
	for issued < accesses || len(expect) > 0 {
		if issued < accesses && len(expect) < clients && (len(pending) == 0 || r.IntN(3) == 0) {
			k := fmt.Sprint("k", r.IntN(n))
			if r.IntN(2) == 0 {
				k = fmt.Sprint("k", zipf.Uint64())
			}
			req := Request{Key: k}
			w := want{}
			switch p := r.IntN(100); {
			case p < 50:
				req.Op, w.get = OpGet, true
				w.val, w.found = model[k]
			case p < 95:
				req.Op, req.Val = OpPut, []byte(fmt.Sprint(k, ":v", issued))
				model[k] = string(req.Val)
			default:
				req.Op = OpDelete
				delete(model, k)
			}
			expect[c.NextSeq()] = w
			issued++
			step(Input{Request: &req})
			continue
		}
		if len(pending) == 0 {
			t.Fatalf("after %d steps, %d requests wait and no backend call is outstanding: the core is stuck", steps, len(expect))
		}
		i := r.IntN(len(pending))
		out := pending[i]
		pending[i] = pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		complete(out)
	}
	// Drain the shuffles left: the core must finish them on the I/O alone.
	for len(pending) > 0 {
		out := pending[0]
		pending = pending[1:]
		complete(out)
	}
	st := c.stats()
	t.Logf("N=%d: %d accesses in %d steps; peaks: eviction cache %d (bound %d), storage cache %d, shuffling buffer %d of %d (shuffling_buffer_max %v), early cache-ins %d of %d, evictions ahead %d of %d, I/O semaphore between %d and %d; %v shuffles",
		n, answered, steps, peak.EvictionCache, evictionCacheBound(n, o, clients), peak.StorageCache, peak.Buffer, o.ShufflingBuffer,
		kvtest.Stat(t, st, "shuffling_buffer_max"), peak.Early, o.EarlyCacheIns, peak.Evictions, o.EvictionsAhead, minIO, peak.IO, kvtest.Stat(t, st, "shuffles"))
	if bind && (peak.Early == 0 || peak.Buffer < int64(o.ShufflingBuffer)/2 || peak.Evictions < int64(o.EvictionsAhead)) {
		t.Errorf("a semaphore was never (nearly) exhausted (peaks %+v): the run exercised too little", peak)
	}
}

// TestLongRun runs a real store (sealed slots on the in-memory backend,
// no journal) of N = longRunN keys, bulk-loaded full, through at least
// 10*N accesses from 32 concurrent clients: half the keys Zipf-hot, half
// uniform; a client writes (puts, and now and then deletes) only the keys
// it owns and reads any, so every key has one well-defined last value.
// While it runs, a sampler checks the core's state on the loop every few
// milliseconds (checkUsage: the semaphores within their bounds and
// consistent, the eviction cache below evictionCacheBound); every Get must
// return a value written to its key (its owner's: exactly its last), and
// at the end every key holds its last written value.
func TestLongRun(t *testing.T) {
	n := longRunN
	if testing.Short() {
		n = 1 << 10
	}
	const clients, valueSize = 32, 32
	accesses := int64(10 * n)
	ctx := t.Context()
	s, err := open(ctx, kv.Env{Backend: mem.New(), Keys: kvtest.NewKeys(t), Capacity: n, ValueSize: valueSize, Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := func(i int) string { return fmt.Sprint("k", i) }
	if got, err := s.Load(ctx, func(yield func(string, []byte) bool) {
		for i := range n {
			if !yield(key(i), []byte(key(i)+":v0")) {
				return
			}
		}
	}); err != nil || got != n {
		t.Fatalf("Load = %d, %v", got, err)
	}
	last := make([]string, n) // by key: its owner's last write ("" deleted)
	for i := range last {
		last[i] = key(i) + ":v0"
	}

	start := time.Now()
	var (
		done    atomic.Int64 // accesses done
		stop    = make(chan struct{})
		samples int
		peak    usage
		sampled sync.WaitGroup
		failure atomic.Pointer[string]
	)
	fail := func(msg string) {
		failure.CompareAndSwap(nil, &msg)
	}
	sampled.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			var u usage
			var err error
			if s.onLoop(func() { u, err = checkUsage(s.core, s.opts) }) != nil {
				return
			}
			samples++
			peak = peak.maxOf(u)
			if err == nil && u.EvictionCache > evictionCacheBound(n, s.opts, clients) {
				err = fmt.Errorf("the eviction cache holds %d blocks, above the bound %d", u.EvictionCache, evictionCacheBound(n, s.opts, clients))
			}
			if err != nil {
				fail(fmt.Sprintf("after %d accesses: %v", done.Load(), err))
				return
			}
		}
	})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 11))
			zipf := rand.NewZipf(r, 1.2, 1, uint64(n-1))
			for v := 1; done.Add(1) <= accesses && failure.Load() == nil; v++ {
				i := r.IntN(n)
				if r.IntN(2) == 0 {
					i = int(zipf.Uint64())
				}
				k, own := key(i), i%clients == c
				var err error
				switch p := r.IntN(100); {
				case own && p < 45:
					val := fmt.Sprint(k, ":v", v)
					if err = s.Put(ctx, k, []byte(val)); err == nil {
						last[i] = val
					}
				case own && p < 50:
					if err = s.Delete(ctx, k); err == nil {
						last[i] = ""
					}
				default:
					var got []byte
					var ok bool
					got, ok, err = s.Get(ctx, k)
					switch {
					case err != nil:
					case own && (string(got) != last[i] || ok != (last[i] != "")):
						err = fmt.Errorf("Get(%s) by its owner = %q, %v; want %q", k, got, ok, last[i])
					case ok && !strings.HasPrefix(string(got), k+":"):
						err = fmt.Errorf("Get(%s) = %q, a value never written to it", k, got)
					}
				}
				if err != nil {
					fail(err.Error())
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sampled.Wait()
	elapsed := time.Since(start)
	if msg := failure.Load(); msg != nil {
		t.Fatal(*msg)
	}
	// A final, quiet sample.
	var u usage
	var uerr error
	if err := s.onLoop(func() { u, uerr = checkUsage(s.core, s.opts) }); err != nil || uerr != nil {
		t.Fatal(err, uerr)
	}
	peak = peak.maxOf(u)
	for i := range n {
		got, ok, err := s.Get(ctx, key(i))
		if err != nil || ok != (last[i] != "") || string(got) != last[i] {
			t.Fatalf("at the end, Get(%s) = %q, %v, %v; want %q", key(i), got, ok, err, last[i])
		}
	}
	st := s.Stats()
	t.Logf("N=%d: %d accesses by %d clients in %v (%.0f/s), %d samples; peaks sampled: eviction cache %d (bound %d), storage cache %d, shuffling buffer %d of %d, early cache-ins %d of %d, evictions ahead %d of %d, I/O semaphore %d; counters: eviction_cache_max %v, shuffling_buffer_max %v, shuffles %v, evicted %v, dummy evictions %v",
		n, accesses, clients, elapsed.Round(time.Millisecond), float64(accesses)/elapsed.Seconds(), samples,
		peak.EvictionCache, evictionCacheBound(n, s.opts, clients), peak.StorageCache, peak.Buffer, s.opts.ShufflingBuffer,
		peak.Early, s.opts.EarlyCacheIns, peak.Evictions, s.opts.EvictionsAhead, peak.IO,
		kvtest.Stat(t, st, "eviction_cache_max"), kvtest.Stat(t, st, "shuffling_buffer_max"), kvtest.Stat(t, st, "shuffles"),
		kvtest.Stat(t, st, "evicted"), kvtest.Stat(t, st, "dummy_evictions"))
	if m := int64(kvtest.Stat(t, st, "eviction_cache_max")); m > evictionCacheBound(n, s.opts, clients) {
		t.Errorf("eviction_cache_max %d is above the bound %d", m, evictionCacheBound(n, s.opts, clients))
	}
	if m := int64(kvtest.Stat(t, st, "shuffling_buffer_max")); m > int64(s.opts.ShufflingBuffer) {
		t.Errorf("shuffling_buffer_max %d is above the shuffling buffer %d", m, s.opts.ShufflingBuffer)
	}
	if samples < 10 {
		t.Errorf("only %d samples of the core's state were taken", samples)
	}
}
