package ringoram

import (
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
)

// TestOpKind checks how an operation's kind is told from its shape: an
// eviction reads Z slots of each bucket and rewrites them all; a
// multi-path read that rewrote a bucket it was not due to is still a
// multi-path read, so the reshuffle check judges it; an eviction whose
// Write left a bucket out is still an eviction, so the eviction checks
// judge it.
func TestOpKind(t *testing.T) {
	const z, s = 2, 4
	l := Layout{Prefix: "tb/0/"}
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
		want  OpKind
	}{
		{"plain multi-path read", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{3, 2}), write(2, nil, 1, 3)}, OpPathRead},
		{"read rewriting a bucket it read once", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{3, 2}), write(2, []uint64{1}, 1, 3)}, OpPathRead},
		{"eviction", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{1, 4}, SlotRef{3, 1}, SlotRef{3, 2}), write(2, []uint64{1, 3}, 1, 3)}, OpEviction},
		{"eviction leaving a bucket out", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{1, 4}, SlotRef{3, 1}, SlotRef{3, 2}), write(2, []uint64{1}, 1, 3)}, OpEviction},
		{"every bucket read rewritten", []observe.Record{read(1, SlotRef{1, 0}, SlotRef{3, 2}), write(2, []uint64{1, 3}, 1, 3)}, OpEviction},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops, err := View(c.calls, l, z)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != 1 || ops[0].Kind != c.want {
				t.Fatalf("parsed %+v; want one %v", ops, c.want)
			}
		})
	}
}

// TestChoices checks the ranks storage's view gives the slots
// path reads take: among the slots of their bucket unread since it was
// last written whole, several of one bucket in one read among the same
// ones; reads of an eviction count as reads, a whole rewrite makes every
// slot unread again, a partial one does not.
func TestChoices(t *testing.T) {
	const slots = 4 // Z=1, S=3
	path := func(reads ...SlotRef) Op {
		return Op{Kind: OpPathRead, SlotReads: [][]SlotRef{reads}, WroteSlots: map[uint64]uint64{}}
	}
	partial := path(SlotRef{1, 0}, SlotRef{2, 3})
	partial.WroteSlots[2] = 1
	eviction := Op{Kind: OpEviction, SlotReads: [][]SlotRef{{{1, 1}}}, WroteSlots: map[uint64]uint64{1: 1<<slots - 1}}
	ops := []Op{
		path(SlotRef{1, 2}),
		partial,
		eviction,
		path(SlotRef{1, 1}, SlotRef{2, 0}),
		path(SlotRef{2, 1}, SlotRef{2, 2}),
	}
	want := []audit.Choice{{Rank: 2, Unread: 4}, {Rank: 0, Unread: 3}, {Rank: 3, Unread: 4}, {Rank: 1, Unread: 4}, {Rank: 0, Unread: 3}, {Rank: 0, Unread: 2}, {Rank: 1, Unread: 2}}
	if got := Choices([][]Op{ops}, slots); !slices.Equal(got, want) {
		t.Fatalf("choices %v; want %v", got, want)
	}
}
