package oblivistore

import (
	"cmp"
	"slices"
)

// trace tells a test what the trusted side knows of a run and storage
// must not: which request each read is for, where each real block lands
// when a level is written, which dummy each dummy cache-in takes. It is
// the ground truth of the audits, set only by tests (export_test.go),
// never from options or configuration, and no hook changes what storage
// sees. A nil hook is not called.
type trace struct {
	// Read sees every read the core issues, of partition p: a request's
	// partition read (seq is the request's sequence number, from 1; a
	// read of no slot too) or a shuffling cache-in (seq 0).
	Read func(p int32, slots []Slot, seq uint64)
	// Admitted sees every request as it is admitted: its sequence number
	// and key.
	Admitted func(seq uint64, key string)
	// Placed sees every level the shuffler or the bulk load writes: its
	// partition and level, and the slots its real blocks landed in, in
	// the order they were gathered (the levels read, in level and slot
	// order, then the eviction cache's blocks; the load's in its order).
	Placed func(p int32, l int8, reals []int32)
	// DummyRead sees every dummy cache-in: the rank, in slot order, of
	// the slot it took among the level's dummy slots unread before it,
	// and how many those were.
	DummyRead func(rank, unread int)
}

func (t trace) admitted(r *Req) {
	if t.Admitted != nil {
		t.Admitted(r.Seq, r.Key)
	}
}

func (t trace) read(p int32, slots []Slot, seq uint64) {
	if t.Read != nil {
		t.Read(p, slots, seq)
	}
}

// gatheringOrder numbers a shuffle's blocks in the order gathered, for
// placed (nil when nothing traces them).
func (t trace) gatheringOrder(blocks []Entry) map[string]int {
	if t.Placed == nil {
		return nil
	}
	order := make(map[string]int, len(blocks))
	for i, b := range blocks {
		order[b.Key] = i
	}
	return order
}

// tracePlaced reports the real blocks of level l of partition p, just
// laid out, in the order gathered.
func (t trace) placed(p int32, l int8, lv *Level, gathered map[string]int) {
	if t.Placed == nil {
		return
	}
	var reals []int32
	for x, real := range lv.Real {
		if real {
			reals = append(reals, int32(x))
		}
	}
	slices.SortFunc(reals, func(a, b int32) int { return cmp.Compare(gathered[lv.Keys[a]], gathered[lv.Keys[b]]) })
	t.Placed(p, l, reals)
}

// traceDummy reports dummy slot x of lv, just read.
func (t trace) dummy(lv *Level, x int32) {
	if t.DummyRead == nil {
		return
	}
	rank, unread := 0, 0
	for s, real := range lv.Real {
		if real || (lv.Read[s] && int32(s) != x) {
			continue
		}
		unread++
		if int32(s) < x {
			rank++
		}
	}
	t.DummyRead(rank, unread)
}
