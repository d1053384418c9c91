package audit

import (
	"testing"

	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// TestTreeOpKind checks how an operation's kind is told from its shape: an
// eviction reads Z slots of each bucket and rewrites them all; a
// multi-path read that rewrote a bucket it was not due to is still a
// multi-path read, so the reshuffle check judges it; an eviction whose
// Write left a bucket out is still an eviction, so the eviction checks
// judge it.
func TestTreeOpKind(t *testing.T) {
	const z, s = 2, 4
	l := ringoram.Layout{Prefix: TreebeardPrefix(0)}
	read := func(seq uint64, slots ...SlotRef) observe.Record {
		r := observe.Record{Seq: seq, Op: observe.OpRead}
		for _, x := range slots {
			r.Addrs = append(r.Addrs, l.SlotAddr(x.Bucket, x.Slot))
		}
		return r
	}
	write := func(seq uint64, full []uint64, meta ...uint64) observe.Record {
		r := observe.Record{Seq: seq, Op: observe.OpWrite}
		for _, b := range full {
			for x := range z + s {
				r.Addrs = append(r.Addrs, l.SlotAddr(b, x))
			}
		}
		for _, b := range meta {
			r.Addrs = append(r.Addrs, l.MetaAddr(b))
		}
		return r
	}
	cases := []struct {
		name  string
		calls []observe.Record
		want  TreeOpKind
	}{
		{"plain multi-path read", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{3, 2}), write(2, nil, 1, 3)}, TreePathRead},
		{"read rewriting a bucket it read once", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{3, 2}), write(2, []uint64{1}, 1, 3)}, TreePathRead},
		{"eviction", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{1, 4}, SlotRef{3, 1}, SlotRef{3, 2}), write(2, []uint64{1, 3}, 1, 3)}, TreeEviction},
		{"eviction leaving a bucket out", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{1, 4}, SlotRef{3, 1}, SlotRef{3, 2}), write(2, []uint64{1}, 1, 3)}, TreeEviction},
		{"every bucket read rewritten", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{3, 2}), write(2, []uint64{1, 3}, 1, 3)}, TreeEviction},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops, err := TreebeardViews(c.calls, 1, z)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops[0]) != 1 || ops[0][0].Kind != c.want {
				t.Fatalf("parsed %+v; want one %v", ops[0], c.want)
			}
		})
	}
}
