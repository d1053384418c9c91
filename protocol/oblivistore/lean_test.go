package oblivistore

import (
	"encoding/binary"
	"maps"
	"reflect"
	"testing"

	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/kv"
)

// TestLogsHoldNoOverwrittenValue: the logs hold the value a partition
// read brings for a Get, the group's read result and the Front's message
// from it, and neither holds it for a blind Put, which replaces it before
// anything reads it (GroupMachine.lean, FrontMachine.lean).
func TestLogsHoldNoOverwrittenValue(t *testing.T) {
	c := NewCore(64, Options{}.EnsureDefaults(64), [32]byte{7})
	storage := simStorage{}
	writes, _, err := c.Load(maps.All(map[string][]byte{"put": []byte("old value"), "get": []byte("stored value")}))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		storage.write(w)
	}
	if front, group := loggedValues(t, c, storage, Request{Op: kv.MutSet, Key: "put", Val: []byte("new")}); front != 0 || group != 0 {
		t.Errorf("a blind Put logged the value its read brought %d times in the Front's log and %d in the group's; want none", front, group)
	}
	if front, group := loggedValues(t, c, storage, Request{Op: kv.MutRead, Key: "get"}); front != 1 || group != 1 {
		t.Errorf("a Get logged the value its read brought %d times in the Front's log and %d in the group's; want once in each", front, group)
	}
}

// loggedValues steps c through request r, its storage calls completed
// from storage, until it is answered, and counts the values read from
// storage that the Front's entries and the group's hold.
func loggedValues(t *testing.T, c *Core, storage simStorage, r Request) (front, group int) {
	t.Helper()
	answered := false
	queue := []Input{{Request: &r}}
	for len(queue) > 0 {
		outs, err := c.Step(queue[0])
		if err != nil {
			t.Fatal(err)
		}
		queue = queue[1:]
		f, g := values(t, c.Entries())
		front, group = front+f, group+g
		for _, o := range outs {
			if o.Reply != nil {
				answered = true
				continue
			}
			in, err := storage.complete(o)
			if err != nil {
				t.Fatal(err)
			}
			queue = append(queue, in)
		}
	}
	if !answered {
		t.Fatalf("request %+v was not answered", r)
	}
	return front, group
}

// values counts the values read from storage that entries hold: in the
// Front's, a ReadFinished's or a BlockReady's; in a group's, a real
// block of a read's result, unless all zeros.
func values(t *testing.T, entries []Applied) (front, group int) {
	t.Helper()
	for _, a := range entries {
		if a.Machine == FrontNode {
			e, err := DecodeFrontEntry(a.Entry)
			if err != nil {
				t.Fatal(err)
			}
			if m := e.Msg; m != nil && (m.Msg.Finished != nil && m.Msg.Finished.Val != nil || m.Msg.Ready != nil && m.Msg.Ready.Val != nil) {
				front++
			}
			continue
		}
		e, err := DecodeGroupEntry(a.Entry)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range readBlocks(e) {
			if b.Real && !zeros(b.Val) {
				group++
			}
		}
	}
	return front, group
}

func readBlocks(e GroupEntry) []Block {
	if e.Read == nil {
		return nil
	}
	return e.Read.Blocks
}

// TestEarlierMessageEntriesDecode: a group's log entry of a message from
// the Front decodes to the message, as this build encodes it
// (recFromFront, a read as msgReadBlind) and as the build before did
// (recToGroup, its sender included; a read as msgRead, which has no
// Blind), so that build's journal replays.
func TestEarlierMessageEntriesDecode(t *testing.T) {
	for _, m := range []ToGroup{
		{ID: MsgID{From: FrontNode, Incarnation: 3, Seq: 70000}, Group: 1, Ack: 65000, Msg: PartitionMsg{Progress: &Progress{Bypass: true}}},
		{ID: MsgID{From: FrontNode, Incarnation: 1, Seq: 2}, Group: 0, Ack: 1, Msg: PartitionMsg{Read: &PartitionRead{Seq: 9, P: 4, Key: "k", Has: true}}},
		{ID: MsgID{From: FrontNode, Incarnation: 1, Seq: 3}, Group: 0, Ack: 2, Msg: PartitionMsg{Read: &PartitionRead{Seq: 10, P: 5, Key: "b", Has: true, Blind: true}}},
	} {
		e, err := DecodeGroupEntry(AppendGroupEntry(nil, GroupEntry{Msg: &m}))
		if err != nil || !reflect.DeepEqual(e, GroupEntry{Msg: &m}) {
			t.Errorf("entry of message %+v came back as %+v, %v", m, e.Msg, err)
		}
		earlier := appendMsgID([]byte{recToGroup}, m.ID)
		earlier = binary.AppendUvarint(binary.AppendUvarint(earlier, uint64(m.Group)), m.Ack)
		want := m
		if r := m.Msg.Read; r != nil {
			earlier = binary.AppendUvarint(append(earlier, msgRead), r.Seq)
			earlier = binary.AppendUvarint(earlier, uint64(r.P))
			earlier = delta.AppendBool(delta.AppendBytes(earlier, []byte(r.Key)), r.Has)
			unblind := *r
			unblind.Blind = false
			want.Msg.Read = &unblind
		} else {
			earlier = appendPartitionMsg(earlier, m.Msg)
		}
		e, err = DecodeGroupEntry(earlier)
		if err != nil || !reflect.DeepEqual(e, GroupEntry{Msg: &want}) {
			t.Errorf("the earlier build's entry of message %+v came back as %+v, %v", want, e.Msg, err)
		}
	}
}

// TestEarlierReadResultsDecode: a read result the build before journaled
// (recRead: each block a flag, then a real block's value) decodes to the
// result, as one of this build (recReadZeros) does, a real block of
// zeros included.
func TestEarlierReadResultsDecode(t *testing.T) {
	want := Input{Read: &ReadDone{Group: 3, ID: 7, Blocks: []Block{{Real: true, Val: []byte("v")}, {}, {Real: true, Val: make([]byte, 4)}}}}
	earlier := binary.AppendUvarint(binary.AppendUvarint([]byte{recRead}, 3), 7)
	earlier = binary.AppendUvarint(earlier, 3)
	earlier = delta.AppendBytes(delta.AppendBool(earlier, true), []byte("v"))
	earlier = delta.AppendBool(earlier, false)
	earlier = delta.AppendBytes(delta.AppendBool(earlier, true), make([]byte, 4))
	for _, b := range [][]byte{appendInput(nil, want), earlier} {
		got, err := decodeInput(b)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("read result of kind %d came back as %+v, %v; want %+v", b[0], got.Read, err, want.Read)
		}
	}
}
