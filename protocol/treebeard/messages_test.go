package treebeard

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// scriptedTrees stands for the ORAM layer: it records every message it
// gets, answers real reads with the value "stored", and loses the first
// message to tree 0 (CodeTransport).
type scriptedTrees struct {
	mu   sync.Mutex
	got  []ReadPathsMsg
	lost bool
}

func (s *scriptedTrees) ReadPaths(m ReadPathsMsg) ReadPathsReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, m)
	if m.Tree == 0 && !s.lost {
		s.lost = true
		return ReadPathsReply{Status: Status{Code: CodeTransport, Detail: "lost"}}
	}
	out := make([]ringoram.ReadResult, len(m.Reads))
	for i, r := range m.Reads {
		if r.Real {
			out[i] = ringoram.ReadResult{Block: tree.Block{ID: r.Want, Value: []byte("stored")}, Found: true}
		}
	}
	return ReadPathsReply{Results: out}
}

func (s *scriptedTrees) messages() []ReadPathsMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ReadPathsMsg(nil), s.got...)
}

// TestStashMessages drives a Stash shard with scripted messages and no
// backend: a part lost on its way to a tree is sent again unchanged; a
// copy of a Router's batch gets the first copy's replies without reaching
// the trees; the next batch releases the first one's reply and its parts
// release theirs at the trees; a copy arriving after the release is
// refused unhandled; and an eviction's hand-off and acknowledgement, each
// sent twice, happen once.
func TestStashMessages(t *testing.T) {
	trees := &scriptedTrees{}
	s := newStash(0, newTestStashCore(1), &quota{capacity: 8}, nullLog(), newNetState())
	s.connect([]PathReader{trees, trees, trees, trees})
	s.core.setPosition(blockID("a"), Position{Tree: 2, Leaf: 3})

	first := AccessMsg{ID: MsgID{Sender: Endpoint{LayerRouter, 0}, Epoch: 5}, Batch: []Request{{Op: OpGet, ID: blockID("a")}}}
	rep := s.Access(first)
	if rep.Code != CodeOK || len(rep.Replies) != 1 || string(rep.Replies[0].Old) != "stored" {
		t.Fatalf("Access = %+v; want the stored value", rep)
	}
	got := trees.messages()
	if len(got) != 5 || !sameResend(got) {
		t.Fatalf("the trees got %d messages; want a part for each of 4 trees and tree 0's sent again unchanged: %+v", len(got), got)
	}
	if again := s.Access(first); !reflect.DeepEqual(again, rep) || len(trees.messages()) != 5 {
		t.Fatalf("a copy of the batch got %+v and sent %d messages; want the first reply and none", again, len(trees.messages())-5)
	}

	second := AccessMsg{ID: MsgID{Sender: Endpoint{LayerRouter, 0}, Epoch: 6}, Release: []MsgID{first.ID}}
	if rep := s.Access(second); rep.Code != CodeOK {
		t.Fatalf("second batch: %+v", rep)
	}
	if held := s.core.msgs.heldCount(); held != 1 {
		t.Fatalf("%d replies held after the first was released; want the second's only", held)
	}
	for _, m := range trees.messages()[5:] {
		if want := []MsgID{{Sender: Endpoint{LayerStash, 0}, Epoch: 5, Seq: uint64(m.Tree)}}; !reflect.DeepEqual(m.Release, want) {
			t.Fatalf("epoch 6's part for tree %d releases %v; want %v", m.Tree, m.Release, want)
		}
	}
	if late := s.Access(first); late.Code != CodeUnavailable || len(trees.messages()) != 9 {
		t.Fatalf("a copy after the release got %+v; want CodeUnavailable and nothing sent", late.Status)
	}

	// a, read, is in the stash now, at a new position.
	at := s.core.pos[blockID("a")]
	hand := EvictionBlocksMsg{ID: MsgID{Sender: Endpoint{LayerORAM, at.Tree}}}
	blocks := s.EvictionBlocks(hand)
	if again := s.EvictionBlocks(hand); len(blocks.Blocks) != 1 || !reflect.DeepEqual(again, blocks) {
		t.Fatalf("hand-off %+v, its copy %+v; want block a twice", blocks, again)
	}
	done := EvictionDoneMsg{ID: MsgID{Sender: Endpoint{LayerORAM, at.Tree}, Seq: 1}, Blocks: blocks.Blocks, Placed: []int64{4}}
	if rep := s.EvictionDone(done); len(rep.Stale) != 0 || s.core.stash[blockID("a")] != nil {
		t.Fatalf("EvictionDone = %+v; want block a placed and out of the stash", rep)
	}
	// A second application would call the placed copy stale, and the tree
	// would forget the block's only copy.
	if rep := s.EvictionDone(done); len(rep.Stale) != 0 {
		t.Fatalf("a copy of EvictionDone reported %v stale", rep.Stale)
	}
}

// sameResend reports whether the trees got tree 0's part twice, unchanged.
func sameResend(got []ReadPathsMsg) bool {
	var zero []ReadPathsMsg
	for _, m := range got {
		if m.Tree == 0 {
			zero = append(zero, m)
		}
	}
	return len(zero) == 2 && reflect.DeepEqual(zero[0], zero[1])
}

// recordingNet is a network of direct calls that records every batch a
// Router sends a Stash shard.
type recordingNet struct {
	keys *seal.Keys
	mu   sync.Mutex
	sent []AccessMsg
}

func (n *recordingNet) carry(m Sealed, receive func(Sealed) Sealed, _ bool) (Sealed, Status) {
	if m.Kind == kindAccess {
		msg, err := openWire(n.keys, accessCodec, m, m.To)
		if err != nil {
			panic(err)
		}
		n.mu.Lock()
		n.sent = append(n.sent, msg)
		n.mu.Unlock()
	}
	return receive(m), Status{}
}

// TestIncarnationGrows: a store's incarnation is 1 when it is made and
// one more at every open, after a Close or a crash alike, and every
// message and request id of an open carries its incarnation.
func TestIncarnationGrows(t *testing.T) {
	b, keys, dir := mem.New(), kvtest.NewKeys(t), t.TempDir()
	for n, want := range []uint64{1, 2, 3, 4} {
		net := &recordingNet{keys: keys}
		j, err := journal.Open(dir, keys, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b.Reopen()
		s, err := open(t.Context(), kv.Env{Backend: b, Keys: keys, Capacity: 64, ValueSize: 16, Fresh: n == 0, Journal: j,
			Options: Options{TestingKnobs: TestingKnobs{Transport: net}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(t.Context(), fmt.Sprint("k", n), []byte("v")); err != nil {
			t.Fatal(err)
		}
		net.mu.Lock()
		for _, m := range net.sent {
			for _, r := range m.Batch {
				if m.ID.Incarnation != want || r.Req.Incarnation != want {
					t.Errorf("open %d: batch %+v carries request %+v; want incarnation %d in both", n, m.ID, r.Req, want)
				}
			}
		}
		if len(net.sent) == 0 {
			t.Errorf("open %d: no batch was sent", n)
		}
		net.mu.Unlock()
		if n%2 == 1 { // a crash
			j.Crash()
			s.Close()
			continue
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		j.Close()
	}
}

// checkRuns checks that r holds exactly the epochs of released, as
// sorted, disjoint, non-adjacent runs.
func checkRuns(t *testing.T, r *epochRuns, released []MsgID) {
	t.Helper()
	want := map[uint64]bool{}
	for _, id := range released {
		want[id.Epoch] = true
	}
	count := uint64(0)
	for i, run := range r.runs {
		if run.From >= run.To || i > 0 && r.runs[i-1].To >= run.From {
			t.Fatalf("runs %+v: run %d is empty, out of order, overlapping or adjacent", r.runs, i)
		}
		for e := run.From; e < run.To; e++ {
			if !want[e] {
				t.Fatalf("runs hold epoch %d, never released", e)
			}
		}
		count += run.To - run.From
	}
	if count != uint64(len(want)) {
		t.Fatalf("runs hold %d epochs, want %d", count, len(want))
	}
	for e := range want {
		if !r.has(e) {
			t.Fatalf("epoch %d released, not found", e)
		}
	}
}
