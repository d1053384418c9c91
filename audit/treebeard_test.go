package audit

import (
	"slices"
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

// TestTreebeardChoices checks the ranks storage's view gives the slots
// path reads take: among the slots of their bucket unread since it was
// last written whole, several of one bucket in one read among the same
// ones; reads of an eviction count as reads, a whole rewrite makes every
// slot unread again, a partial one does not.
func TestTreebeardChoices(t *testing.T) {
	const slots = 4 // Z=1, S=3
	path := func(reads ...SlotRef) TreeOp {
		return TreeOp{Kind: TreePathRead, SlotReads: [][]SlotRef{reads}, WroteSlots: map[uint64]uint64{}}
	}
	partial := path(SlotRef{1, 0}, SlotRef{2, 3})
	partial.WroteSlots[2] = 1
	eviction := TreeOp{Kind: TreeEviction, SlotReads: [][]SlotRef{{{1, 1}}}, WroteSlots: map[uint64]uint64{1: 1<<slots - 1}}
	ops := []TreeOp{
		path(SlotRef{1, 2}),
		partial,
		eviction,
		path(SlotRef{1, 1}, SlotRef{2, 0}),
		path(SlotRef{2, 1}, SlotRef{2, 2}),
	}
	want := []Choice{{2, 4}, {0, 3}, {3, 4}, {1, 4}, {0, 3}, {0, 2}, {1, 2}}
	if got := TreebeardChoices([][]TreeOp{ops}, slots); !slices.Equal(got, want) {
		t.Fatalf("choices %v; want %v", got, want)
	}
}
