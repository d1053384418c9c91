package waffle

import "container/heap"

// ref names an object: a real key, or a dummy (Key is then the dummy's
// 8-byte id).
type ref struct {
	Dummy bool
	Key   string
}

// entry is one position in an ordered index: objects are ordered by
// (order timestamp, tie, key), least recently accessed first.
type entry struct {
	order, tie uint64
	key        string
}

func (a entry) less(b entry) bool {
	if a.order != b.order {
		return a.order < b.order
	}
	if a.tie != b.tie {
		return a.tie < b.tie
	}
	return a.key < b.key
}

// index is the ordered index of the objects on storage of one kind (real
// keys not in the cache, or dummies). The paper uses a balanced BST keyed by
// <ts : key>; this is a binary min-heap of (ts, tie, key) with lazy
// updates instead: an object's entry is pushed whenever it (re)enters
// storage or its timestamp changes, and an entry is used only while it
// matches the object's current state (see store.head), so stale entries
// are dropped when they reach the top. Min and update cost O(log n)
// amortised. The index of reals is rebuilt when stale entries outnumber
// live ones; that of dummies at every reset of their timestamps.
type index []entry

func (h index) Len() int           { return len(h) }
func (h index) Less(i, j int) bool { return h[i].less(h[j]) }
func (h index) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *index) Push(x any)        { *h = append(*h, x.(entry)) }
func (h *index) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// index returns the index of one kind of object.
func (s *store) index(dummy bool) *index {
	if dummy {
		return &s.dummies
	}
	return &s.reals
}

// push enters object rf, on storage, in its index.
func (s *store) push(rf ref, o *object) {
	heap.Push(s.index(rf.Dummy), entry{order: o.order, tie: o.tie, key: rf.Key})
}

// head drops the stale entries at the top of one kind's index and returns
// the object it names first: the least recently accessed of that kind on
// storage.
func (s *store) head(dummy bool) (ref, bool) {
	h := s.index(dummy)
	for len(*h) > 0 {
		if rf, ok := s.current(dummy, (*h)[0]); ok {
			return rf, true
		}
		heap.Pop(h)
	}
	return ref{}, false
}

// current returns the object that entry e of one kind's index names, and
// whether e matches its current state (on storage, with e's order).
func (s *store) current(dummy bool, e entry) (ref, bool) {
	rf := ref{Dummy: dummy, Key: e.key}
	o := s.objs[rf]
	return rf, o != nil && o.elem == nil && o.order == e.order && o.tie == e.tie
}

// rebuild rebuilds one kind's index from the objects on storage, without
// stale entries.
func (s *store) rebuild(dummy bool) {
	var h index
	for rf, o := range s.objs {
		if rf.Dummy == dummy && o.elem == nil {
			h = append(h, entry{order: o.order, tie: o.tie, key: rf.Key})
		}
	}
	heap.Init(&h)
	*s.index(dummy) = h
}
