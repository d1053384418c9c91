package ringoram

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/mem"
)

// An operation whose Change was handed over (journaled) and whose Write
// never reached storage is found missing (Landed) and run again under its
// Plan from the state it started from (Redo), which gives the tree the
// operation's state and storage its Write: the next reads find every
// block. One whose Write landed is found so, and its Change, top buckets
// resolved from IDs (ResolveTop), gives the same state. Both leave the
// plan-seed source where the tree that ran the operation left it, the
// plan replayed (Planned). Multi-path reads,
// evictions and both together, with top levels in memory.
func TestRedoMakesTheWriteAgain(t *testing.T) {
	for _, landed := range []bool{false, true} {
		t.Run(fmt.Sprint("landed=", landed), func(t *testing.T) { redoMakesTheWriteAgain(t, landed) })
	}
}

func redoMakesTheWriteAgain(t *testing.T, landed bool) {
	f := newTopFixture(t, 6, defaults, 31, 3, noLeak)
	loaded := f.load(40)
	var plan Plan
	var change Change
	f.tr.readAhead = func(_ context.Context, p Plan) error { plan = p; return nil }
	f.tr.writeAhead = func(_ context.Context, c Change) error { change = c; return nil }
	g, redone := f.tr.g, 0
	for i := range 30 {
		start := f.tr.State()
		var stash []Block
		for range 3 {
			stash = append(stash, Block{Block: randomBlock(f.r, 32), Leaf: f.r.Uint64N(g.Leaves())})
		}
		b := loaded[i]
		reqs := []PathRead{{Leaf: b.leaf, Want: b.ID, Real: true}, {Leaf: f.r.Uint64N(g.Leaves())}}
		var err error
		switch i % 3 {
		case 0:
			_, err = f.tr.ReadPaths(f.ctx, reqs)
		case 1:
			_, err = f.tr.Evict(f.ctx, 3, stash)
		default:
			_, _, err = f.tr.ReadEvict(f.ctx, reqs, 2, stash)
		}
		if err != nil {
			t.Fatal(err)
		}
		if landed {
			if err := f.tr.Flush(f.ctx); err != nil {
				t.Fatal(err)
			}
		}
		want := f.tr.State()
		// The process dies: a new tree from the state the operation
		// started from, and the Change as a journal keeps it.
		tr, err := NewDriver(f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Restore(start); err != nil {
			t.Fatal(err)
		}
		tr.Planned(plan) // as recovery replays the recorded plan
		got, err := tr.Landed(f.ctx, change)
		if err != nil || got != landed {
			t.Fatalf("operation %d: Landed = %v, %v; want %v", i, got, err, landed)
		}
		if landed {
			c := journaled(change)
			if err := tr.ResolveTop(&c); err != nil {
				t.Fatal(err)
			}
			err = tr.Apply(c)
		} else {
			err = tr.Redo(f.ctx, plan, change)
			redone++
		}
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
		if got := tr.State(); !reflect.DeepEqual(got, want) {
			t.Fatalf("operation %d: the tree recovered differs from the one that ran it", i)
		}
		tr.writeAhead, tr.readAhead = f.tr.writeAhead, f.tr.readAhead
		f.tr = tr
	}
	for _, b := range loaded[30:] {
		res, err := f.tr.ReadPaths(f.ctx, []PathRead{{Leaf: b.leaf, Want: b.ID, Real: true}})
		if err != nil || !res[0].Found || res[0].Block.ID != b.ID {
			t.Fatalf("after %d operations run again, reading a block loaded: %v, %v", redone, res, err)
		}
	}
}

// journaled returns c as a journal keeps it: its top buckets' blocks
// without values.
func journaled(c Change) Change {
	top := make([]TopBucket, len(c.Top))
	for i, tb := range c.Top {
		top[i] = TopBucket{Bucket: tb.Bucket}
		for _, b := range tb.Blocks {
			b.Block.Value = nil
			top[i].Blocks = append(top[i].Blocks, b)
		}
	}
	c.Top = top
	return c
}

// A tree restored mid-run from its State, over storage as it was then,
// given the inputs the tree got after it, draws the same Plans, reads the
// same blocks, places the same ones and reaches the same State: the
// plan-seed source is part of the state.
func TestRestoredTreeRunsAlike(t *testing.T) {
	f := newTopFixture(t, 6, defaults, 37, 3, noLeak)
	loaded := f.load(40)
	g := f.tr.g
	type input struct {
		reqs  []PathRead
		k     int
		stash []Block
	}
	inputs := make([]input, 30)
	for i := range inputs {
		b := loaded[i]
		in := input{reqs: []PathRead{{Leaf: b.leaf, Want: b.ID, Real: true}, {Leaf: f.r.Uint64N(g.Leaves())}}, k: i % 3}
		if i%4 == 3 {
			in.reqs = nil
		}
		if in.k > 0 || in.reqs == nil {
			in.k = max(in.k, 1)
			for range 3 {
				in.stash = append(in.stash, Block{Block: randomBlock(f.r, 32), Leaf: f.r.Uint64N(g.Leaves())})
			}
		}
		inputs[i] = in
	}
	type output struct {
		plan    Plan
		results []ReadResult
		where   []int64
	}
	run := func(tr *Driver, ins []input) []output {
		var out []output
		tr.readAhead = func(_ context.Context, p Plan) error { out = append(out, output{plan: p}); return nil }
		for _, in := range ins {
			results, where, err := tr.ReadEvict(f.ctx, in.reqs, in.k, in.stash)
			if err != nil {
				t.Fatal(err)
			}
			out[len(out)-1].results, out[len(out)-1].where = results, where
		}
		tr.readAhead = nil
		return out
	}
	run(f.tr, inputs[:10])
	mid := roundTripGob(t, f.tr.State())
	copied := copyStorage(t, f)
	want := run(f.tr, inputs[10:])
	cfg := f.cfg
	cfg.Backend, cfg.Seed = copied, nil // a tree of fresh seeds, then restored
	tr, err := NewDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Restore(mid); err != nil {
		t.Fatal(err)
	}
	got := run(tr, inputs[10:])
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the restored tree's plans, results or placements differ from the tree's")
	}
	if !reflect.DeepEqual(tr.State(), f.tr.State()) {
		t.Fatal("the restored tree's state differs from the tree's")
	}
}

// copyStorage returns a copy of what f's storage holds.
func copyStorage(t *testing.T, f *fixture) *mem.Backend {
	t.Helper()
	var addrs []string
	if err := f.mem.Scan(f.ctx, "", func(a string) error { addrs = append(addrs, a); return nil }); err != nil {
		t.Fatal(err)
	}
	vals, err := f.mem.Read(f.ctx, addrs)
	if err != nil {
		t.Fatal(err)
	}
	out := mem.New()
	items := make([]backend.Item, len(addrs))
	for i, a := range addrs {
		items[i] = backend.Item{Addr: a, Value: vals[i]}
	}
	if err := out.Write(f.ctx, items); err != nil {
		t.Fatal(err)
	}
	return out
}
