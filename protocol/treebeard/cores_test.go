package treebeard

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The layers' cores driven by scripted messages, with no backend, no
// goroutine and no clock.

func blockID(name string) tree.BlockID {
	var id tree.BlockID
	copy(id[:], name)
	return id
}

func newTestStashCore(seed byte) *stashCore {
	return newStashCore(4, tree.NewGeometry(16), 8, 64, [32]byte{seed})
}

// named returns the blocks batch names, in order.
func named(batch []Request) []tree.BlockID {
	ids := make([]tree.BlockID, len(batch))
	for i, r := range batch {
		ids[i] = r.ID
	}
	return ids
}

// idsOf returns the IDs of blocks, in order.
func idsOf(blocks []ringoram.Block) []tree.BlockID {
	ids := make([]tree.BlockID, len(blocks))
	for i, b := range blocks {
		ids[i] = b.Block.ID
	}
	return ids
}

// readsOf flattens a plan's reads, with the tree of each.
func readsOf(p epochPlan) (trees []int, reads []ringoram.PathRead) {
	for t, rs := range p.Reads {
		for _, r := range rs {
			trees, reads = append(trees, t), append(reads, r)
		}
	}
	return trees, reads
}

// realRead returns the only real read of p: its tree and its place among
// that tree's reads.
func realRead(t *testing.T, p epochPlan) (int, int) {
	t.Helper()
	tr, at := -1, -1
	for i, rs := range p.Reads {
		for j, r := range rs {
			if r.Real {
				if tr >= 0 {
					t.Fatalf("two real reads in one plan")
				}
				tr, at = i, j
			}
		}
	}
	if tr < 0 {
		t.Fatalf("no real read in the plan")
	}
	return tr, at
}

// results answers p's reads of tree tr: the real one with value.
func results(p epochPlan, tr int, value string) []ringoram.ReadResult {
	out := make([]ringoram.ReadResult, len(p.Reads[tr]))
	for i, r := range p.Reads[tr] {
		if r.Real {
			out[i] = ringoram.ReadResult{Block: tree.Block{ID: r.Want, Value: []byte(value)}, Found: true}
		}
	}
	return out
}

func TestStashCoreEpochs(t *testing.T) {
	c := newTestStashCore(1)
	a, b := blockID("a"), blockID("b")

	// Epoch 1: two new blocks, answered at once, one fake read each.
	p := c.plan(1, []Request{{Op: OpPut, ID: a, Value: []byte("1")}, {Op: OpPut, ID: b, Value: []byte("2")}}, 8)
	if _, reads := readsOf(p); len(reads) != 2 || reads[0].Real || reads[1].Real {
		t.Fatalf("epoch 1 reads %+v, want two fake reads", reads)
	}
	made := Reply{Result: kv.Result{Exists: true, Written: true, Len: 1}}
	if want := []completion{{To: waiter{1, 0}, Reply: made}, {To: waiter{1, 1}, Reply: made}}; !reflect.DeepEqual(p.Done, want) {
		t.Fatalf("epoch 1 done %+v, want %+v", p.Done, want)
	}
	posA := c.pos[a]
	if got := c.evictionBlocks(posA.Tree); len(got) != 0 {
		t.Fatalf("an eviction took %d blocks whose epoch is not journaled", len(got))
	}
	c.endEpoch(named([]Request{{ID: a}, {ID: b}}))

	// Evict a: acked and untouched, it leaves the stash and keeps its position.
	blocks := c.evictionBlocks(posA.Tree)
	if !slices.ContainsFunc(blocks, func(eb ringoram.Block) bool { return eb.Block.ID == a }) {
		t.Fatalf("the eviction of tree %d was handed %+v, want block a", posA.Tree, blocks)
	}
	placed := make([]int64, len(blocks))
	if stale := c.evictionDone(posA.Tree, idsOf(blocks), placed); len(stale) != 0 {
		t.Fatalf("stale copies %+v of untouched blocks", stale)
	}
	if exists, stashed := c.has(a); !exists || stashed || c.pos[a] != posA {
		t.Fatalf("after its eviction a: exists %v, stashed %v, at %+v (was %+v)", exists, stashed, c.pos[a], posA)
	}

	// Epoch 2: one real read of a's path, the repeats queue behind it
	// with fake reads, and all are answered in order when it returns.
	batch := []Request{{Op: OpGet, ID: a}, {Op: OpPut, ID: a, Value: []byte("3")}, {Op: OpGet, ID: a}}
	p = c.plan(2, batch, 8)
	tr, at := realRead(t, p)
	if tr != posA.Tree || p.Reads[tr][at].Leaf != posA.Leaf {
		t.Fatalf("real read of tree %d leaf %d, want a's position %+v", tr, p.Reads[tr][at].Leaf, posA)
	}
	if _, reads := readsOf(p); len(reads) != 3 || len(p.Done) != 0 {
		t.Fatalf("epoch 2: %d reads, %d done; want 3 reads, none done", len(reads), len(p.Done))
	}
	done, err := c.returned(tr, p.Reads[tr], results(p, tr, "1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []completion{
		{To: waiter{2, 0}, Reply: Reply{Result: kv.Result{Found: true, Old: []byte("1"), Exists: true, Len: 1}}},
		{To: waiter{2, 1}, Reply: Reply{Result: kv.Result{Found: true, Exists: true, Written: true, Len: 1}}},
		{To: waiter{2, 2}, Reply: Reply{Result: kv.Result{Found: true, Old: []byte("3"), Exists: true, Len: 1}}},
	}
	if !reflect.DeepEqual(done, want) {
		t.Fatalf("epoch 2 done %+v, want %+v", done, want)
	}
	if string(c.stash[a].value) != "3" {
		t.Fatalf("a holds %q, want 3", c.stash[a].value)
	}
	c.endEpoch(named(batch))
}

func TestStashCoreFailedReads(t *testing.T) {
	c := newTestStashCore(2)
	a := blockID("a")
	c.setPosition(a, Position{Tree: 1, Leaf: 5})

	p := c.plan(1, []Request{{Op: OpGet, ID: a}}, 8)
	tr, _ := realRead(t, p)
	readErr := errors.New("storage unreachable")
	done, err := c.returned(tr, p.Reads[tr], nil, readErr)
	if len(done) != 1 || done[0].Reply.Code != CodeUnavailable || done[0].Reply.Detail != readErr.Error() || err == nil || err.Error() != readErr.Error() {
		t.Fatalf("a failed read answered %+v and %v, want its error as CodeUnavailable and the epoch's failure", done, err)
	}
	if c.pos[a] != (Position{Tree: 1, Leaf: 5}) || len(c.inflight) != 0 {
		t.Fatalf("after a failed read a is at %+v with %d reads in flight; want it unmoved", c.pos[a], len(c.inflight))
	}

	// A block missing from the path it should be on is tampering.
	p = c.plan(2, []Request{{Op: OpGet, ID: a}}, 8)
	tr, _ = realRead(t, p)
	done, _ = c.returned(tr, p.Reads[tr], make([]ringoram.ReadResult, len(p.Reads[tr])), nil)
	if len(done) != 1 || done[0].Reply.Code != CodeTampered || !errors.Is(done[0].Reply.Err(), kv.ErrTampered) {
		t.Fatalf("a block missing from its path answered %+v, want ErrTampered", done)
	}

	// A tree answering fewer reads than asked fails them, and the epoch
	// (its fake reads answer no request of their own).
	p = c.plan(3, []Request{{Op: OpGet, ID: a}}, 8)
	tr, _ = realRead(t, p)
	if done, err = c.returned(tr, p.Reads[tr], nil, nil); len(done) != 1 || done[0].Reply.Code == CodeOK || err == nil {
		t.Fatalf("a short answer gave %+v and %v, want the request and the epoch failed", done, err)
	}
	if _, err := c.returned((tr+1)%4, []ringoram.PathRead{{Leaf: 3}}, nil, nil); err == nil {
		t.Fatal("a short answer to a fake read did not fail the epoch")
	}
}

// TestStashCoreFull: whether a new key is refused as full depends only on
// the room the epoch was given (its input) and the keys the epoch
// deletes: a shard given room for one new key refuses the second, a
// deletion's slot takes a later new key of the same epoch, and the room
// an epoch did not use goes back.
func TestStashCoreFull(t *testing.T) {
	c := newStashCore(2, tree.NewGeometry(4), 1, 64, [32]byte{3})
	a, b, d := blockID("a"), blockID("b"), blockID("d")
	batch := []Request{{Op: OpPut, ID: a, Value: []byte("1")}, {Op: OpPut, ID: b, Value: []byte("2")}, {Op: OpPut, ID: a, Value: []byte("3")}}
	if need := c.roomNeeded(batch); need != 2 {
		t.Fatalf("a batch creating a and b needs room for %d keys; want 2", need)
	}
	p := c.plan(1, batch, 1)
	if len(p.Done) != 3 || p.Done[0].Reply.Code != CodeOK || p.Done[1].Reply.Code != CodeFull || !errors.Is(p.Done[1].Reply.Err(), kv.ErrFull) || p.Done[2].Reply.Code != CodeOK {
		t.Fatalf("two new keys with room for one: %+v; want the second refused as full", p.Done)
	}
	if _, reads := readsOf(p); len(reads) != 3 {
		t.Fatalf("%d reads, want one per request, refused or not", len(reads))
	}
	if got := c.takeReleased(); got != 0 {
		t.Fatalf("the epoch released %d keys' room; it used all it had", got)
	}
	batch = []Request{{Op: OpDelete, ID: a}, {Op: OpPut, ID: d, Value: []byte("4")}, {Op: OpPut, ID: b, Value: []byte("5")}}
	p = c.plan(2, batch, 0)
	if p.Done[1].Reply.Code != CodeOK || p.Done[2].Reply.Code != CodeFull {
		t.Fatalf("a deletion then two new keys with no room given: %+v; want the first new key in the deleted one's slot, the second full", p.Done)
	}
	p = c.plan(3, []Request{{Op: OpDelete, ID: d}, {Op: OpGet, ID: b}}, 2)
	if got := c.takeReleased(); got != 3 || p.Done[0].Reply.Code != CodeOK {
		t.Fatalf("an epoch given room for 2 that deleted a key released %d keys' room; want 3", got)
	}
}

// script runs a fixed sequence of epochs through c: each epoch's plan,
// every real read answered with a value, the epoch's record, and an
// eviction of every tree that places every block handed to it, so that
// later epochs read real paths again. It returns everything c output,
// reads with the block they want by value.
func script(c *stashCore, from uint64) string {
	out := ""
	for e := from; e < from+20; e++ {
		var batch []Request
		for i := range 3 {
			id := blockID(fmt.Sprint("k", (int(e)*7+i*3)%5))
			batch = append(batch, Request{Op: Op((int(e) + i) % 3), ID: id, Value: []byte(fmt.Sprint(e))})
		}
		p := c.plan(e, batch, 8)
		out += fmt.Sprintf("%d: done %+v\n", e, p.Done)
		for tr, rs := range p.Reads {
			for _, r := range rs {
				out += fmt.Sprintf("  read tree %d leaf %d", tr, r.Leaf)
				if r.Real {
					out += fmt.Sprintf(" for %x", r.Want[:2])
				}
				out += "\n"
			}
			done, err := c.returned(tr, rs, results(p, tr, "v"), nil)
			out += fmt.Sprintf("  %+v %v\n", done, err)
		}
		out += fmt.Sprintf("  %x\n", c.endEpoch(named(batch)))
		for tr := range p.Reads {
			blocks := c.evictionBlocks(tr)
			placed := make([]int64, len(blocks)) // all in the root
			out += fmt.Sprintf("  evict %d: %d blocks, stale %+v\n", tr, len(blocks), c.evictionDone(tr, idsOf(blocks), placed))
		}
	}
	return out
}

// TestStashCoreDeterministic: the same inputs give the same outputs, and a
// shard restored from a snapshot goes on as the original does.
func TestStashCoreDeterministic(t *testing.T) {
	one, two := newTestStashCore(4), newTestStashCore(4)
	if a, b := script(one, 1), script(two, 1); a != b {
		t.Fatalf("two shards with one seed diverged:\n%s\n%s", a, b)
	}
	if one.stats.realReads < 10 {
		t.Fatalf("the script made %d real reads; it must exercise them", one.stats.realReads)
	}
	restored := newTestStashCore(5)
	if err := restored.restore(one.snapshot()); err != nil {
		t.Fatal(err)
	}
	if a, b := script(one, 21), script(restored, 21); a != b {
		t.Fatalf("a restored shard diverged from the original:\n%s\n%s", a, b)
	}
	if a, b := script(newTestStashCore(4), 1), script(newTestStashCore(6), 1); a == b {
		t.Fatalf("shards with other seeds drew the same reads")
	}
	if err := restored.restore(stashSnapshot{Rand: []byte("junk")}); err == nil {
		t.Fatalf("a snapshot with a broken random state was restored")
	}
}

// TestTreeCoreBarrier drives a tree's epoch barrier with a scripted
// sequence of parts: an epoch is ready once every shard's part is in, a
// duplicate part completes nothing, and an epoch missing a part is given
// up, its held parts failing and its late part refused.
func TestTreeCoreBarrier(t *testing.T) {
	c := newTreeCore(3, 3, 2)
	step := func(epoch uint64, shard int, want partOutcome, wantReady ...int) {
		t.Helper()
		ready, got := c.part(epoch, shard)
		if got != want || !slices.Equal(ready, wantReady) {
			t.Fatalf("part(%d, %d) = %v, %v; want %v, %v", epoch, shard, ready, got, wantReady, want)
		}
	}
	step(7, 1, partHeld)
	step(8, 0, partHeld)
	step(7, 1, partDuplicate) // a second part of shard 1 does not stand for shard 0's
	step(7, 2, partHeld)
	step(7, 2, partDuplicate)
	step(7, 0, partComplete, 0, 1, 2)
	step(8, 2, partHeld)
	held, missing := c.abandon(8)
	if !slices.Equal(held, []int{0, 2}) || !slices.Equal(missing, []int{1}) {
		t.Fatalf("abandon(8) = held %v, missing %v; want [0 2], [1]", held, missing)
	}
	step(8, 1, partLate)
	step(8, 0, partLate)
	if held, missing := c.abandon(8); held != nil || missing != nil {
		t.Fatalf("abandoning epoch 8 again gave %v, %v", held, missing)
	}
	if held, _ := c.abandon(9); held != nil || c.abandoned[9] {
		t.Fatalf("abandoning an epoch no part of which came marked it: %v", held)
	}
	step(9, 0, partHeld)
	step(9, 1, partHeld)
	step(9, 2, partComplete, 0, 1, 2)
	if held, _ := c.abandon(9); held != nil || c.abandoned[9] {
		t.Fatalf("abandoning an epoch read already marked it: %v", held)
	}
	if len(c.parts) != 0 {
		t.Fatalf("%d epochs still waiting", len(c.parts))
	}
	if a, b := c.nextEviction(), c.nextEviction(); a != 0 || b != 1 {
		t.Fatalf("evictions numbered %d, %d; want 0, 1", a, b)
	}
	c.leak = leakEagerShardParts
	if ready, _ := c.part(9, 0); len(ready) != 1 {
		t.Fatalf("leakEagerShardParts did not read a part at once")
	}
}

func TestTreeCoreEvictionSchedule(t *testing.T) {
	c := newTreeCore(1, 3, 2) // A = 3, k = 2
	for _, step := range []struct{ reads, paths int }{{2, 0}, {2, 2}, {5, 4}, {0, 0}, {1, 0}, {2, 2}} {
		if got := c.served(step.reads); got != step.paths {
			t.Fatalf("served(%d) owed %d paths, want %d", step.reads, got, step.paths)
		}
	}
	id := blockID("a")
	reads := []ringoram.PathRead{{Leaf: 1}, {Leaf: 2, Want: id, Real: true}}
	if n := c.counted(reads); n != 2 {
		t.Fatalf("counted %d reads, want every read, fake or real", n)
	}
	c.leak = leakEvictOnRealReads
	if n := c.counted(reads); n != 1 {
		t.Fatalf("leakEvictOnRealReads counted %d reads, want the real one", n)
	}
}

func TestRouterCore(t *testing.T) {
	c := routerCore{id: 1, shards: 2, next: 10}
	if _, ok := c.cut(); ok {
		t.Fatalf("an epoch without requests was cut")
	}
	var ids []tree.BlockID
	for i := range 6 {
		id := blockID(fmt.Sprint("key", i))
		ids = append(ids, id)
		if at := c.add(Request{ID: id}, 3); at != i {
			t.Fatalf("request %d collected at %d", i, at)
		}
	}
	f, ok := c.cut()
	if !ok || f.Epoch != 10 || len(f.Batches) != 2 {
		t.Fatalf("cut %+v, %v; want epoch 10 with a batch per shard", f, ok)
	}
	seen := 0
	for s, batch := range f.Batches {
		for i, r := range batch {
			at := f.Index[s][i]
			if r.ID != ids[at] || shardOf(r.ID, 2) != s || i > 0 && f.Index[s][i-1] >= at {
				t.Fatalf("shard %d request %d is %v from %d: wrong shard or order", s, i, r.ID, at)
			}
			seen++
		}
	}
	if seen != 6 || c.size() != 0 {
		t.Fatalf("%d requests forwarded, %d still collecting", seen, c.size())
	}
	c.add(Request{ID: ids[0]}, 3)
	f, _ = c.cut()
	if f.Epoch != 11 {
		t.Fatalf("next epoch is %d, want 11", f.Epoch)
	}
	if got, want := f.Batches[shardOf(ids[0], 2)][0].Req, (RequestID{Router: 1, Incarnation: 3, Seq: 6}); got != want {
		t.Fatalf("the seventh request's id is %+v, want %+v", got, want)
	}
}

// A failure crosses a layer boundary as a Status, a code and a message,
// and turns back into an error that keeps both: errors.Is matches the kv
// error of its code, and nothing else.
func TestReplyCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code Code
		is   error
	}{
		{fmt.Errorf("%w: 64 keys", kv.ErrFull), CodeFull, kv.ErrFull},
		{fmt.Errorf("ringoram: slot 3: %w", kv.ErrTampered), CodeTampered, kv.ErrTampered},
		{kv.ErrClosed, CodeClosed, kv.ErrClosed},
		{errors.New("journal: disk full"), CodeUnavailable, kv.ErrUnavailable},
	} {
		r := failed(tc.err)
		if r.Code != tc.code || r.Err().Error() != tc.err.Error() {
			t.Errorf("%v: code %d, error %q; want code %d and the same message", tc.err, r.Code, r.Err(), tc.code)
		}
		for _, kvErr := range []error{kv.ErrFull, kv.ErrTampered, kv.ErrClosed, kv.ErrUnavailable} {
			if got := errors.Is(r.Err(), kvErr); got != (kvErr == tc.is) {
				t.Errorf("%v: errors.Is(%v) = %v", tc.err, kvErr, got)
			}
		}
	}
	if (Reply{Result: kv.Result{Found: true}}).Err() != nil || statusOf(nil) != (Status{}) {
		t.Error("a successful call has an error")
	}
}

// TestStashCoreRequestsOnce: a request a later batch brings again (a
// Router retrying it) is applied once: a copy of one applied gets the
// stored reply, a copy of one waiting for its block's real read gets the
// first one's reply when it returns, each copy costing a fake read; once
// the Router releases the batch that brought it, its reply is forgotten.
func TestStashCoreRequestsOnce(t *testing.T) {
	c := newTestStashCore(7)
	a := blockID("a")
	appendX := Request{Req: RequestID{Incarnation: 1, Seq: 1}, Op: kv.MutAppend, ID: a, Value: []byte("x")}
	p := c.plan(1, []Request{appendX}, 8)
	first := p.Done[0].Reply
	p = c.plan(2, []Request{appendX}, 8)
	if _, reads := readsOf(p); len(reads) != 1 || reads[0].Real || !reflect.DeepEqual(p.Done, []completion{{To: waiter{2, 0}, Reply: first}}) {
		t.Fatalf("a copy of an applied request: reads %+v, done %+v; want one fake read and the stored reply %+v", reads, p.Done, first)
	}
	if v := c.stash[a].value; string(v) != "x" {
		t.Fatalf("a holds %q after a request and its copy; want it applied once", v)
	}
	c.endEpoch(named([]Request{appendX}))
	blocks := c.evictionBlocks(c.pos[a].Tree)
	c.evictionDone(c.pos[a].Tree, idsOf(blocks), make([]int64, len(blocks)))

	// a is in a tree now: the next request reads its real path, and a
	// copy arriving meanwhile waits for it.
	appendY := Request{Req: RequestID{Incarnation: 1, Seq: 2}, Op: kv.MutAppend, ID: a, Value: []byte("y")}
	p = c.plan(3, []Request{appendY}, 8)
	tr, _ := realRead(t, p)
	copied := c.plan(4, []Request{appendY}, 8)
	if _, reads := readsOf(copied); len(reads) != 1 || reads[0].Real || len(copied.Done) != 0 {
		t.Fatalf("a copy of a request in flight: reads %+v, done %+v; want one fake read, waiting", reads, copied.Done)
	}
	done, err := c.returned(tr, p.Reads[tr], results(p, tr, "x"), nil)
	if err != nil || len(done) != 2 || done[0].To != (waiter{3, 0}) || done[1].To != (waiter{4, 0}) || !reflect.DeepEqual(done[0].Reply, done[1].Reply) {
		t.Fatalf("the real read's return answered %+v, %v; want the request and its copy, alike", done, err)
	}
	if v := c.stash[a].value; string(v) != "xy" {
		t.Fatalf("a holds %q; want the append applied once", v)
	}

	c.requests.release(1)
	c.requests.release(2)
	if _, held := c.requests.replies[appendX.Req]; held {
		t.Fatalf("the reply of a request whose batches were released is still held")
	}
	if _, held := c.requests.replies[appendY.Req]; !held {
		t.Fatalf("the reply of a request whose batches were not released was forgotten")
	}
}
