package treebeard

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/internal/durable"
)

// restoredStash returns a new Stash shard whose core is restored from
// image, reading from trees.
func restoredStash(t *testing.T, image []byte, trees *scriptedTrees) *Stash {
	t.Helper()
	core := newTestStashCore(9)
	if err := core.restoreImage(image); err != nil {
		t.Fatal(err)
	}
	s := newStash(0, core, &quota{capacity: 8}, nullLog(), newNetState())
	s.connect([]PathReader{trees, trees, trees, trees})
	return s
}

// TestCopiesAfterRestore: the record of the messages a Stash shard
// handled is part of its state. A copy of a Router's batch, of an
// eviction's hand-off and of its acknowledgement, delivered to a shard
// restored from a snapshot taken after they were answered, gets the
// stored reply, reaches no tree and leaves the state as it was, byte for
// byte; once its sender has released it, a copy delivered after another
// restore is refused unhandled.
func TestCopiesAfterRestore(t *testing.T) {
	trees := &scriptedTrees{lost: true}
	s := newStash(0, newTestStashCore(1), &quota{capacity: 8}, nullLog(), newNetState())
	s.connect([]PathReader{trees, trees, trees, trees})
	s.core.setPosition(blockID("a"), Position{Tree: 2, Leaf: 3})
	s.core.setPosition(blockID("b"), Position{Tree: 1, Leaf: 5})
	s.core.setStashed(blockID("b"), []byte("held"))

	router := Endpoint{LayerRouter, 0}
	batch := AccessMsg{ID: MsgID{Sender: router, Incarnation: 1, Epoch: 5},
		Batch: []Request{{Req: RequestID{Incarnation: 1, Seq: 1}, Op: OpPut, ID: blockID("a"), Value: []byte("new")}}}
	access := s.Access(batch)
	if access.Code != CodeOK || len(access.Replies) != 1 || !access.Replies[0].Found {
		t.Fatalf("Access = %+v; want a's put, found", access)
	}
	bTree := s.core.pos[blockID("b")].Tree
	evictor := Endpoint{LayerORAM, bTree}
	hand := EvictionBlocksMsg{ID: MsgID{Sender: evictor, Incarnation: 1, Epoch: 1}}
	blocks := s.EvictionBlocks(hand)
	if blocks.Code != CodeOK || len(blocks.Blocks) == 0 {
		t.Fatalf("EvictionBlocks = %+v; want block b", blocks)
	}
	done := EvictionDoneMsg{ID: MsgID{Sender: evictor, Incarnation: 1, Epoch: 1, Seq: 1}, Blocks: blocks.Blocks, Placed: make([]int64, len(blocks.Blocks))}
	placed := s.EvictionDone(done)
	if placed.Code != CodeOK {
		t.Fatalf("EvictionDone = %+v", placed)
	}

	image := s.core.image()
	restored := restoredStash(t, image, trees)
	sent := len(trees.messages())
	if again := restored.Access(batch); !reflect.DeepEqual(again, access) {
		t.Errorf("a copy of the batch after a restore got %+v; want the stored %+v", again, access)
	}
	if again := restored.EvictionBlocks(hand); !reflect.DeepEqual(again, blocks) {
		t.Errorf("a copy of the hand-off after a restore got %+v; want the stored %+v", again, blocks)
	}
	if again := restored.EvictionDone(done); !reflect.DeepEqual(again, placed) {
		t.Errorf("a copy of the acknowledgement after a restore got %+v; want the stored %+v", again, placed)
	}
	if n := len(trees.messages()) - sent; n != 0 {
		t.Errorf("the copies sent the trees %d messages; want none", n)
	}
	if !bytes.Equal(restored.core.image(), image) {
		t.Errorf("the copies changed the restored shard's state")
	}

	next := AccessMsg{ID: MsgID{Sender: router, Incarnation: 1, Epoch: 6}, Release: []MsgID{batch.ID}}
	if rep := restored.Access(next); rep.Code != CodeOK {
		t.Fatalf("the next batch: %+v", rep.Status)
	}
	again := restoredStash(t, restored.core.image(), trees)
	sent = len(trees.messages())
	if late := again.Access(batch); late.Code != CodeUnavailable || len(trees.messages()) != sent {
		t.Errorf("a copy of a released batch after a restore got %+v and sent %d messages; want CodeUnavailable and none",
			late.Status, len(trees.messages())-sent)
	}
}

// TestCopyOfBatchAwaitsJournal: a copy of a batch arriving while the
// first is handled, before its record is durable included, waits (and
// gives back the room its driver took for it); once the journal's
// outcome is in, the reply the first copy gets is stored, a failure of
// the journal included, and every later copy gets exactly it.
func TestCopyOfBatchAwaitsJournal(t *testing.T) {
	c := newTestStashCore(1)
	id := MsgID{Sender: Endpoint{LayerRouter, 0}, Incarnation: 1, Epoch: 3}
	batch := stashEntry{Kind: entryBatch, Msg: id, Epoch: 3, Room: 1,
		Batch: []Request{{Req: RequestID{Incarnation: 1, Seq: 1}, Op: OpPut, ID: blockID("n"), Value: []byte("v")}}}
	if out := c.step(batch); out.Copy != nil || len(out.Reads) == 0 {
		t.Fatalf("the first copy of a batch: %+v; want it planned", out)
	}
	for _, before := range []stashEntry{{Kind: entryResults, Epoch: 3}, {Kind: entryEpochEnd, Epoch: 3}} {
		if out := c.step(batch); out.Copy == nil || !out.Copy.Pending || out.Released != 1 || len(out.Reads) != 0 {
			t.Fatalf("a copy while the first is handled: %+v; want it pending, its room given back, nothing read", out)
		}
		c.step(before)
	}
	failure := Status{Code: CodeUnavailable, Detail: "treebeard: journal: injected"}
	answer := c.step(stashEntry{Kind: entryJournaled, Epoch: 3, Failure: failure}).Answer
	rep, err := accessReplyCodec.parse(answer)
	if err != nil || len(rep.Replies) != 1 || rep.Replies[0].Status != failure {
		t.Fatalf("the batch's reply after a failed journal: %+v, %v; want its put failed with %v", rep, err, failure)
	}
	if cp := c.step(batch).Copy; cp == nil || cp.Pending || !bytes.Equal(cp.Reply, answer) {
		t.Fatalf("a copy after the journal: %+v; want the stored reply", cp)
	}
	c.step(stashEntry{Kind: entryRelease, Released: []MsgID{id}})
	if cp := c.step(batch).Copy; cp == nil || cp.Refused.Code != CodeUnavailable {
		t.Fatalf("a copy after the release: %+v; want it refused", cp)
	}
}

// TestMsgTableReleasedNeverForgotten: a machine (a Stash shard, a tree)
// refuses a copy of a message released however many messages ago (the
// trees' earlier record forgot after 4,096), released in any order, and
// after its state went through an image; its record of them stays one
// run of epochs per stream.
func TestMsgTableReleasedNeverForgotten(t *testing.T) {
	table := newMsgTable()
	const n = 10_000
	ids := make([]MsgID, n)
	for e := range ids {
		ids[e] = MsgID{Sender: Endpoint{LayerORAM, 3}, Incarnation: 2, Epoch: uint64(e), Seq: 1}
		if table.admit(ids[e], kindEvictionDoneReply) != nil {
			t.Fatalf("message %+v, new, taken for a copy", ids[e])
		}
		table.answer(ids[e], []byte{byte(e)})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rng.Shuffle(n, func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for i, id := range ids {
		table.release(id)
		if i%1000 == 0 {
			checkRuns(t, &table.streams[streamOf(id)].released, ids[:i+1])
		}
	}
	table = msgTableOf(table.image())
	if held, runs := table.heldCount(), len(table.streams[streamOf(ids[0])].released.runs); held != 0 || runs != 1 {
		t.Fatalf("after releasing all: %d replies held, %d runs; want none and one", held, runs)
	}
	for _, id := range []MsgID{ids[0], ids[n-1]} {
		if cp := table.admit(id, kindEvictionDoneReply); cp == nil || cp.Refused.Code != CodeUnavailable {
			t.Fatalf("a copy of released %+v: %+v; want it refused", id, cp)
		}
	}
	other := MsgID{Sender: Endpoint{LayerORAM, 3}, Incarnation: 3, Epoch: ids[0].Epoch, Seq: 1}
	if cp := table.admit(other, kindEvictionDoneReply); cp != nil {
		t.Fatalf("a message of a later incarnation with a released epoch was taken for a copy: %+v", cp)
	}
}

// TestCopyTakesNoRoom: a copy of a Router's batch plans nothing, so its
// driver takes no room for new keys from the store's quota for it, which
// would leave another shard planning at that moment short of room.
func TestCopyTakesNoRoom(t *testing.T) {
	trees := &scriptedTrees{lost: true}
	s := newStash(0, newTestStashCore(1), &quota{capacity: 8}, nullLog(), newNetState())
	s.connect([]PathReader{trees, trees, trees, trees})
	var rooms []int64
	s.applied = func(e stashEntry, _ stashOutput) {
		if e.Kind == entryBatch {
			rooms = append(rooms, e.Room)
		}
	}
	batch := AccessMsg{ID: MsgID{Sender: Endpoint{LayerRouter, 0}, Incarnation: 1, Epoch: 5},
		Batch: []Request{{Req: RequestID{Incarnation: 1, Seq: 1}, Op: OpPut, ID: blockID("new"), Value: []byte("v")},
			{Req: RequestID{Incarnation: 1, Seq: 2}, Op: OpDelete, ID: blockID("new")}}} // the key is new again for a copy
	first := s.Access(batch)
	if first.Code != CodeOK || len(first.Replies) != 2 || first.Replies[0].Code != CodeOK || first.Replies[1].Code != CodeOK {
		t.Fatalf("Access = %+v", first)
	}
	if again := s.Access(batch); !reflect.DeepEqual(again, first) {
		t.Fatalf("a copy of the batch got %+v; want the stored %+v", again, first)
	}
	if !reflect.DeepEqual(rooms, []int64{1, 0}) {
		t.Fatalf("the batch and its copy took room %v from the store; want [1 0]", rooms)
	}
}

// TestMsgTableOtherKind: a message id that comes again as another kind of
// message is refused unhandled, whether the first is being handled or
// answered, and the first keeps its place.
func TestMsgTableOtherKind(t *testing.T) {
	table := newMsgTable()
	id := MsgID{Sender: Endpoint{LayerORAM, 1}, Incarnation: 1, Epoch: 4}
	if cp := table.admit(id, kindEvictionBlocksReply); cp != nil {
		t.Fatalf("a new message taken for a copy: %+v", cp)
	}
	for _, answered := range []bool{false, true} {
		if answered {
			table.answer(id, []byte("blocks"))
		}
		if cp := table.admit(id, kindEvictionDoneReply); cp == nil || cp.Refused.Code != CodeUnavailable {
			t.Fatalf("the id again as another kind (first answered: %v): %+v; want it refused", answered, cp)
		}
	}
	if cp := table.admit(id, kindEvictionBlocksReply); cp == nil || string(cp.Reply) != "blocks" {
		t.Fatalf("a copy of the first: %+v; want its stored reply", cp)
	}
}

// nullLog is a Stash shard's log that keeps nothing.
func nullLog() *machineLog { return newMachineLog(durable.New(nil, nil, nil), 0, &checkpoints{}) }
