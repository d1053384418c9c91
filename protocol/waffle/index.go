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
// storage or its timestamp changes, and an entry popped is used only if it
// still matches the object's current state (see store.valid), so stale
// entries are skipped. Min and update cost O(log n) amortised; the heap is
// compacted when stale entries outnumber live ones.
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

func (h *index) push(e entry) { heap.Push(h, e) }

func (h *index) pop() (entry, bool) {
	if len(*h) == 0 {
		return entry{}, false
	}
	return heap.Pop(h).(entry), true
}

// rebuild replaces the heap's entries by es.
func (h *index) rebuild(es []entry) {
	*h = es
	heap.Init(h)
}
