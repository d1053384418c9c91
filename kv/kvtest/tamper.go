package kvtest

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/observe"
)

// The tamper cases on a running store. TamperFlip and TamperSwap change
// storage while the store is closed; these change it while the store runs
// (through live storage, between two of its calls), as a storage operator
// can at any moment:
//
//   - replay: an item the store wrote earlier is put back at its own
//     address after the store overwrote it;
//   - move: an item is copied over another address of the same kind.
//
// Afterwards the store is used on: every Get must return the latest
// acknowledged value (missing for a deleted key) or an error wrapping
// kv.ErrTampered, never an old or a wrong value, never "missing" for a key
// that exists. And each case must prove it tested something: the store
// must have read a tampered address after the tampering, before it wrote
// or deleted that address itself (live's log shows which), and then some
// Get must have returned kv.ErrTampered.
//
// Storage's items come in kinds, told apart by their value length (a Ring
// ORAM bucket's metadata and its slots, say). Each case tampers with one
// kind per run, on fresh storage, so that a kind whose seal binds too
// little cannot hide behind another kind that the store reads first (in
// Ring ORAM a path read opens the metadata before the slots).

// tamperKeys is how many keys a tamper run writes; tamperValueSize the
// length of every value it writes, so that a protocol that does not pad
// values (encrypted) stores items of one length.
const (
	tamperKeys      = 8
	tamperValueSize = 16
	// The rounds of Gets after the tampering (useAfter).
	minRounds    = 2
	maxRounds    = 200
	reportRounds = 4
	// unreadRounds bounds the rounds of Gets before the tampering that
	// wait for an item the store has yet to read (newTamperRig).
	unreadRounds = 8
	// callWait bounds the wait for the store's next call to storage: far
	// longer than any protocol's batch interval. callPoll is how often the
	// wait looks.
	callWait = time.Second
	callPoll = 50 * time.Microsecond
)

// TamperResult is what a running store did after storage tampered with
// one kind of its items.
type TamperResult struct {
	// What describes the tampering.
	What string
	// Tampered is the number of addresses storage changed; Read how many
	// of them the store read after the tampering before it wrote or
	// deleted them itself.
	Tampered, Read int
	// Gets is the number of Gets after the tampering, Detected how many of
	// them returned an error wrapping kv.ErrTampered.
	Gets, Detected int
	// Wrong lists the Gets that returned an old, wrong or missing value, or
	// another error.
	Wrong []string
}

// Err returns what went wrong, or nil when the store passed: no Get went
// wrong, the store read a tampered address, and some Get reported the
// tampering.
func (r TamperResult) Err() error {
	switch {
	case len(r.Wrong) > 0:
		return fmt.Errorf("%s: %d of %d Gets went wrong (want the latest value or kv.ErrTampered): %s",
			r.What, len(r.Wrong), r.Gets, strings.Join(r.Wrong[:min(len(r.Wrong), 4)], "; "))
	case r.Read == 0:
		return fmt.Errorf("%s: the store read none of the %d tampered addresses before rewriting them: the case tested nothing",
			r.What, r.Tampered)
	case r.Detected == 0:
		return fmt.Errorf("%s: the store read %d of the %d tampered addresses, and none of %d Gets returned kv.ErrTampered",
			r.What, r.Read, r.Tampered, r.Gets)
	}
	return nil
}

// TamperReplay runs the replay case on stores of cfg over fresh storage of
// st, one run per kind of item, and returns each run's result: for a
// protocol's test to require that the case fails on an injected leak.
func TamperReplay(t *testing.T, cfg Config, st Storage) []TamperResult {
	t.Helper()
	return tamperRuns(prepared(t, cfg, st), replayKind)
}

// TamperMove runs the move case, as TamperReplay runs the replay case.
func TamperMove(t *testing.T, cfg Config, st Storage) []TamperResult {
	t.Helper()
	return tamperRuns(prepared(t, cfg, st), moveKind)
}

func prepared(t *testing.T, cfg Config, st Storage) *harness {
	t.Helper()
	cfg = cfg.withDefaults()
	cfg.validate(t)
	return newHarness(t, cfg, st)
}

func testTamperReplay(t *testing.T, h *harness) { failed(t, tamperRuns(h, replayKind)) }

func testTamperMove(t *testing.T, h *harness) { failed(t, tamperRuns(h, moveKind)) }

func failed(t *testing.T, results []TamperResult) {
	t.Helper()
	for _, r := range results {
		t.Logf("%s: the store read %d of them; %d of %d Gets reported kv.ErrTampered", r.What, r.Read, r.Detected, r.Gets)
		if err := r.Err(); err != nil {
			t.Error(err)
		}
	}
}

// tamperFunc tampers with the items of kind kind (an index into the value
// lengths of the candidate items, ascending) of a rig's store. It returns
// what it did, the items to write, and the number of kinds it found.
type tamperFunc func(r *tamperRig, kind int) (what string, items []backend.Item, kinds int)

// tamperRuns runs tamper once per kind of item, each run on fresh storage.
func tamperRuns(h *harness, tamper tamperFunc) []TamperResult {
	h.t.Helper()
	var out []TamperResult
	for kind, kinds := 0, 1; kind < kinds; kind++ {
		var res TamperResult
		for attempt := 1; ; attempt++ {
			if kind > 0 || attempt > 1 {
				h = newHarness(h.t, h.cfg, h.st)
			}
			res, kinds = tamperRun(h, tamper, kind)
			if !untested(res) || attempt == untestedAttempts {
				break
			}
			h.t.Logf("%s: the store rewrote every tampered address before reading one; again on fresh storage", res.What)
		}
		out = append(out, res)
	}
	return out
}

// untestedAttempts is how many runs of one kind may test nothing before
// the case fails. Which tampered items a store reads before it rewrites
// them is up to its random choices: ObliviStore read none of 12 once in
// about 20 runs of the whole suite, 1 to 15 of them otherwise.
const untestedAttempts = 3

// untested reports whether a run went right but tested nothing: the
// store read no tampered address before rewriting it.
func untested(r TamperResult) bool { return r.Read == 0 && len(r.Wrong) == 0 }

// tamperRun writes keys on a running store, tampers with its storage and
// judges what the store does next.
func tamperRun(h *harness, tamper tamperFunc, kind int) (TamperResult, int) {
	h.t.Helper()
	r := newTamperRig(h)
	var what string
	var items []backend.Item
	kinds := 0
	mark := r.l.edit(func(b backend.Backend) {
		what, items, kinds = tamper(r, kind)
		if err := b.Write(h.t.Context(), items); err != nil {
			h.t.Fatalf("tampering: %v", err)
		}
	})
	res := TamperResult{What: what, Tampered: len(items)}
	r.useAfter(&res, mark, items)
	r.close()
	return res, kinds
}

// tamperRig is a running store on live storage, with the keys it holds.
type tamperRig struct {
	h    *harness
	s    kv.Store
	l    *live
	want model             // the latest acknowledged value of each key
	gone []string          // keys deleted
	old  map[string][]byte // each key's value before its latest write
	snap map[string][]byte // storage's items when the keys held their old values
}

// newTamperRig opens a store on live storage, puts tamperKeys keys, copies
// storage, and then overwrites all keys but one, deletes that one and reads
// every key, until storage holds other items than the copy: the copy holds
// items older than the store's latest.
func newTamperRig(h *harness) *tamperRig {
	h.t.Helper()
	s, l := h.openLive()
	r := &tamperRig{h: h, s: s, l: l, want: model{}, old: map[string][]byte{}}
	for i := range tamperKeys {
		r.put(capKey(i), valueOf(fmt.Sprint("tamper-old", i), tamperValueSize))
	}
	r.l.edit(func(b backend.Backend) { r.snap = r.items(b) })
	for i := range tamperKeys - 1 {
		r.put(capKey(i), valueOf(fmt.Sprint("tamper-new", i), tamperValueSize))
	}
	last := capKey(tamperKeys - 1)
	mustDelete(h.t, s, last)
	r.old[last] = r.want[last]
	delete(r.want, last)
	r.gone = append(r.gone, last)
	// A protocol that writes back late (TaoStore every K paths) may not
	// yet have written over the copy's items, and one that reads each item
	// once (ObliviStore) may have read every item it wrote over them: the
	// keys are read again until storage holds a newer item the store has
	// yet to read, or for unreadRounds once it holds a newer one (a store
	// that reads an item at every access of its key reads them all).
	for i, since := 0, -1; ; i++ {
		if i == maxRounds {
			h.t.Fatalf("after %d rounds of Gets of every key, storage still holds the copy's items", i)
		}
		r.want.check(h.t, s, r.gone...)
		changed, unread := r.replayable()
		if changed && since < 0 {
			since = i
		}
		if unread || changed && i-since >= unreadRounds {
			return r
		}
	}
}

func (r *tamperRig) put(key string, val []byte) {
	mustPut(r.h.t, r.s, key, val)
	if v, ok := r.want[key]; ok {
		r.old[key] = v
	}
	r.want[key] = val
}

// replayable reports whether storage holds, at some address of the copy,
// another item than the copy (or none), and whether one of them is an
// item the store has yet to read (unread; with Config.FreshAddresses, any).
func (r *tamperRig) replayable() (changed, unread bool) {
	r.l.edit(func(b backend.Backend) {
		now, hist := r.items(b), histories(r.l.log.Records())
		for a, v := range r.snap {
			if !bytes.Equal(now[a], v) {
				changed = true
				unread = unread || r.h.cfg.FreshAddresses || !hist[a].read
			}
		}
	})
	return changed, unread
}

// items returns what storage holds, but for what a running store does not
// read: package kv's records (the addresses under "meta/"), fencing tokens
// (backend.FenceKeyPrefix) and the protocol's Config.Cached.
func (r *tamperRig) items(b backend.Backend) map[string][]byte {
	t := r.h.t
	t.Helper()
	var addrs []string
	if err := b.Scan(t.Context(), "", func(a string) error {
		if !strings.HasPrefix(a, "meta/") && !strings.HasPrefix(a, backend.FenceKeyPrefix) && (r.h.cfg.Cached == nil || !r.h.cfg.Cached(a)) {
			addrs = append(addrs, a)
		}
		return nil
	}); err != nil {
		t.Fatalf("scanning storage: %v", err)
	}
	vals, err := b.Read(t.Context(), addrs)
	if err != nil {
		t.Fatalf("reading storage: %v", err)
	}
	out := make(map[string][]byte, len(addrs))
	for i, a := range addrs {
		out[a] = vals[i]
	}
	return out
}

// history is what storage saw of one address before the tampering.
type history struct {
	writes int    // calls that wrote it
	last   uint64 // the sequence number of the last
	read   bool   // a call read it after the last
}

// histories returns each address's history in records.
func histories(records []observe.Record) map[string]history {
	out := map[string]history{}
	for _, rec := range records {
		for _, a := range rec.Addrs {
			switch h := out[a]; rec.Op {
			case observe.OpWrite:
				out[a] = history{writes: h.writes + 1, last: rec.Seq}
			case observe.OpRead:
				h.read = true
				out[a] = h
			}
		}
	}
	return out
}

// unread returns the addresses of addrs that the store has not read since
// it last wrote them, or all of addrs when it has read every one. A store
// may never read again an item it read once (ObliviStore reads each slot
// of a level once, and the next shuffle rewrites it unread), so storage
// tampers with the items the store has yet to read.
func unread(addrs []string, hist map[string]history) []string {
	var out []string
	for _, a := range addrs {
		if !hist[a].read {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return addrs
	}
	return out
}

// lengths returns the distinct value lengths of the values m holds at
// addrs, ascending: the kinds of item.
func lengths(m map[string][]byte, addrs []string) []int {
	var out []int
	for _, a := range addrs {
		out = append(out, len(m[a]))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ofLength returns the addresses of addrs whose value in m is n bytes
// long, sorted.
func ofLength(m map[string][]byte, addrs []string, n int) []string {
	var out []string
	for _, a := range addrs {
		if len(m[a]) == n {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// replayKind puts back, at its own address, every item of the kind that
// changed since the copy and that the store has not read since (unread):
// the store's newer items of that kind all become the older ones at once,
// a consistent older state of the kind, which only what each seal binds
// of the item's freshness (a version, a batch id, a level's nonce) can
// tell from the newer one; no newer neighbour of the same kind gives it
// away. The other kinds stay as they are, so one kind's freshness cannot
// stand in for another's.
//
// A protocol with Config.FreshAddresses never reads an address again once
// it read it (it deletes it, and writes under fresh ids), so an item put
// back at its own address is never read, by construction: the case then
// also puts the older items of the kind over the addresses written since
// the copy, which the store does read; that replays them under newer
// addresses, and only the address in the seal can tell.
func replayKind(r *tamperRig, kind int) (string, []backend.Item, int) {
	t := r.h.t
	now := r.items(r.l.raw)
	hist := histories(r.l.log.Records()) // every call before the tampering
	var changed []string
	for a, v := range r.snap {
		if !bytes.Equal(now[a], v) {
			changed = append(changed, a)
		}
	}
	kinds := lengths(r.snap, changed)
	if kind >= len(kinds) {
		t.Fatalf("no item of kind %d changed since the copy (kinds by value length: %v)", kind, kinds)
	}
	n := kinds[kind]
	olds := ofLength(r.snap, changed, n)
	var out []backend.Item
	for _, a := range olds {
		if now[a] != nil && r.h.cfg.FreshAddresses {
			t.Fatalf("address %q was rewritten in place: the protocol has no fresh addresses (Config.FreshAddresses)", a)
		}
	}
	targets := olds
	if !r.h.cfg.FreshAddresses {
		targets = unread(olds, hist)
	}
	for _, a := range targets {
		out = append(out, backend.Item{Addr: a, Value: r.snap[a]})
	}
	what := fmt.Sprintf("replayed %d of the %d items of %d bytes that changed, at their own addresses", len(out), len(olds), n)
	if r.h.cfg.FreshAddresses {
		var newer []string
		for a := range now {
			if _, ok := r.snap[a]; !ok {
				newer = append(newer, a)
			}
		}
		newer = unread(ofLength(now, newer, n), hist)
		for i, a := range newer {
			out = append(out, backend.Item{Addr: a, Value: r.snap[olds[i%len(olds)]]})
		}
		what += fmt.Sprintf(", and over the %d addresses written since", len(newer))
	}
	return what, out, len(kinds)
}

// moveKind copies items of the kind over other addresses of the kind:
// for each Config.AddrKind, every item of its earliest group to the next
// address of the group, a group being two or more items whose addresses
// storage saw written alike (the same number of times, last by the same
// call) and not read since (unread). Whatever a protocol binds into a
// seal besides the address (a version counted per write, a batch id, a
// level's nonce, a slot's index) is then the same at both addresses; and
// the earliest group is mostly what the store wrote at its start and has
// not touched since (its initial layout), whose items differ in nothing
// else either (empty buckets, dummies) and lie where the store expects no
// block: only the address in a seal can tell a moved item from the one it
// replaced. When no two items share a history (a protocol writing one
// item per call), every item of each AddrKind moves to the next address
// instead.
func moveKind(r *tamperRig, kind int) (string, []backend.Item, int) {
	t := r.h.t
	now := r.items(r.l.raw)
	addrs := slices.Collect(maps.Keys(now))
	kinds := lengths(now, addrs)
	if kind >= len(kinds) {
		t.Fatalf("storage holds no item of kind %d (kinds by value length: %v)", kind, kinds)
	}
	n := kinds[kind]
	hist := histories(r.l.log.Records()) // every call before the tampering
	byKind := map[string][]string{}
	for _, a := range unread(ofLength(now, addrs, n), hist) {
		k := ""
		if r.h.cfg.AddrKind != nil {
			k = r.h.cfg.AddrKind(a)
		}
		byKind[k] = append(byKind[k], a)
	}
	kindNames := slices.Sorted(maps.Keys(byKind))
	var out []backend.Item
	for _, k := range kindNames {
		out = append(out, cycle(now, earliestGroup(byKind[k], hist))...)
	}
	what := fmt.Sprintf("moved %d items of %d bytes within the earliest group of alike items of each of %d address kinds", len(out), n, len(kindNames))
	if len(out) == 0 {
		for _, k := range kindNames {
			out = append(out, cycle(now, byKind[k])...)
		}
		what = fmt.Sprintf("moved %d items of %d bytes within each of %d address kinds (no two items share a history)", len(out), n, len(kindNames))
	}
	return what, out, len(kinds)
}

// earliestGroup returns the set of addrs with one history in hist, of two
// or more, that was written first (nil if there is none).
func earliestGroup(addrs []string, hist map[string]history) []string {
	groups := map[history][]string{}
	for _, a := range addrs {
		groups[hist[a]] = append(groups[hist[a]], a)
	}
	for _, h := range slices.SortedFunc(maps.Keys(groups), func(a, b history) int {
		return cmp.Or(cmp.Compare(a.last, b.last), cmp.Compare(a.writes, b.writes))
	}) {
		if len(groups[h]) > 1 {
			return groups[h]
		}
	}
	return nil
}

// cycle moves the item of each of addrs (sorted, so that the run is
// reproducible) to the next address, the last to the first: nothing for
// fewer than two.
func cycle(now map[string][]byte, addrs []string) []backend.Item {
	if len(addrs) < 2 {
		return nil
	}
	slices.Sort(addrs)
	out := make([]backend.Item, len(addrs))
	for i, a := range addrs {
		out[i] = backend.Item{Addr: addrs[(i+1)%len(addrs)], Value: now[a]}
	}
	return out
}

// useAfter reads every key in rounds, the keys of a round concurrently
// (so that batching protocols batch them), judges each Get into res and
// sets res.Read. A round counts when the store called storage during it:
// a protocol whose batches run on a clock (Cloak) answers Gets from its
// cache without waiting for a batch, so until it read a tampered address
// each round waits for its next call (calledSince), giving its batches
// time to read. The rounds go on for at least minRounds; until the store
// read a tampered address, for up to maxRounds counted rounds; then until
// a Get reports the tampering, for up to reportRounds counted rounds more,
// or callWait without a call (a store that stopped on the tampering makes
// none, and its next round of Gets reports it).
func (r *tamperRig) useAfter(res *TamperResult, mark uint64, tampered []backend.Item) {
	keys := slices.Sorted(maps.Keys(r.want))
	keys = append(keys, r.gone...)
	seq, lastCall := mark, time.Now()
	counted, sinceRead := 0, 0
rounds:
	for round := 0; counted < maxRounds; round++ {
		if round >= minRounds && (res.Detected > 0 || sinceRead > reportRounds) {
			break
		}
		r.getAll(res, keys)
		if res.Read == 0 && !r.calledSince(seq) {
			break // the store calls storage no more: it will read nothing
		}
		switch now := r.l.log.LastSeq(); {
		case now > seq:
			seq, lastCall = now, time.Now()
			counted++
			if res.Read > 0 {
				sinceRead++
			}
		case time.Since(lastCall) > callWait:
			break rounds // the store stopped calling storage
		default:
			time.Sleep(callPoll)
		}
		res.Read = r.readAfter(mark, tampered)
	}
	res.Read = r.readAfter(mark, tampered)
}

// getAll gets every key at once and judges each Get into res.
func (r *tamperRig) getAll(res *TamperResult, keys []string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, k := range keys {
		wg.Go(func() {
			got, ok, err := r.s.Get(r.h.t.Context(), k)
			mu.Lock()
			defer mu.Unlock()
			r.judge(res, k, got, ok, err)
		})
	}
	wg.Wait()
}

// judge records one Get of key after the tampering.
func (r *tamperRig) judge(res *TamperResult, key string, got []byte, ok bool, err error) {
	res.Gets++
	want, exists := r.want[key]
	var wrong string
	switch {
	case errors.Is(err, kv.ErrTampered):
		res.Detected++
	case err != nil:
		wrong = fmt.Sprintf("Get(%q): %v", key, err)
	case !ok && exists:
		wrong = fmt.Sprintf("Get(%q): missing; want %s", key, show(want))
	case ok && bytes.Equal(got, r.old[key]):
		wrong = fmt.Sprintf("Get(%q) = %s, its value before its latest write", key, show(got))
	case ok && !exists:
		wrong = fmt.Sprintf("Get(%q) = %s; want missing (deleted)", key, show(got))
	case ok && !bytes.Equal(got, want):
		wrong = fmt.Sprintf("Get(%q) = %s; want %s", key, show(got), show(want))
	}
	if wrong != "" {
		res.Wrong = append(res.Wrong, wrong)
	}
}

// calledSince waits until the store has called storage since the log's
// sequence number seq, and reports whether it did within callWait.
func (r *tamperRig) calledSince(seq uint64) bool {
	for start := time.Now(); r.l.log.LastSeq() <= seq; time.Sleep(callPoll) {
		if time.Since(start) > callWait {
			return false
		}
	}
	return true
}

// readAfter returns how many of the tampered addresses the store read
// after mark before it wrote or deleted them.
func (r *tamperRig) readAfter(mark uint64, tampered []backend.Item) int {
	pending := map[string]bool{}
	for _, it := range tampered {
		pending[it.Addr] = true
	}
	read := 0
	for _, rec := range r.l.log.Records() {
		if rec.Seq <= mark || rec.Op == observe.OpScan {
			continue
		}
		for _, a := range rec.Addrs {
			if !pending[a] {
				continue
			}
			delete(pending, a)
			if rec.Op == observe.OpRead {
				read++
			}
		}
	}
	return read
}

// close closes the store, which may report the tampering it found.
func (r *tamperRig) close() {
	if err := r.s.Close(); err != nil && !errors.Is(err, kv.ErrTampered) {
		r.h.t.Errorf("closing the store after the tampering: %v", err)
	}
}
