package oblivistore

import "testing"

// TestSnapshotsWithoutOutboxes: machines restored from snapshots of an
// earlier build, which held no Outbox, hold every message they send from
// then on and send each again at a Resend.
func TestSnapshotsWithoutOutboxes(t *testing.T) {
	const n = 64
	c := NewCore(n, Options{Groups: 2}.EnsureDefaults(n), [32]byte{1})
	front := &FrontMachine{}
	restoreWithout(t, c.front, front, func(st *frontState) { st.Out = nil })
	outs, err := front.Apply(FrontEntry{Request: &Request{ID: 1, Op: OpGet, Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	sent := len(outs)
	if outs, err = front.Apply(FrontEntry{Resend: &Resend{}}); err != nil || len(outs) != sent || sent == 0 {
		t.Fatalf("the Front sent %d messages, then %d again (%v); want them all again", sent, len(outs), err)
	}
	group := &GroupMachine{}
	restoreWithout(t, c.groups[0], group, func(st *groupState) { st.Out = Outbox{} })
	msg := ToGroup{ID: MsgID{From: FrontNode, Seq: 1}, Group: 0, Msg: PartitionMsg{Read: &PartitionRead{Seq: 1, P: 0, Key: "k"}}}
	if _, err := group.Apply(GroupEntry{Msg: &msg}); err != nil {
		t.Fatal(err)
	}
	held := len(group.st.Out.Unacked)
	if outs, err := group.Apply(GroupEntry{Resend: &Resend{}}); err != nil || held == 0 || len(outs) != held {
		t.Fatalf("group 0 holds %d messages and sent %d again (%v); want some, all sent again", held, len(outs), err)
	}
}

// restoreWithout restores into to the snapshot of from with drop applied
// to its state, as an earlier build's snapshot lacks a field.
func restoreWithout[S any, E, O any](t *testing.T, from, to Machine[E, O], drop func(*S)) {
	t.Helper()
	b, err := from.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var st S
	if err := decodeState(b, &st); err != nil {
		t.Fatal(err)
	}
	drop(&st)
	if b, err = encodeState(&st); err != nil {
		t.Fatal(err)
	}
	if err := to.Restore(b); err != nil {
		t.Fatal(err)
	}
}
