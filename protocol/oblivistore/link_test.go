package oblivistore

import (
	"fmt"
	"slices"
	"testing"
)

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

// In one process every message is acknowledged within the Step that sent
// it (Outbox): between steps no machine holds a message, so none is
// kept in memory or in a snapshot.
func TestCoreHoldsNothingUnacknowledged(t *testing.T) {
	r := newCrashRig(t, 256)
	r.options = Options{Groups: 3}
	r.open(true)
	defer r.close()
	for i := range 60 {
		if err := r.s.Put(t.Context(), fmt.Sprint("k", i%20), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		var held []int
		r.s.onLoop(func() {
			c := r.s.core
			for g := range c.groups {
				held = append(held, len(c.front.st.Out[g].Unacked), len(c.groups[g].st.Out.Unacked))
			}
		})
		if slices.ContainsFunc(held, func(n int) bool { return n > 0 }) {
			t.Fatalf("after request %d, messages unacknowledged (Front to each group, each group to the Front): %v", i, held)
		}
	}
}
