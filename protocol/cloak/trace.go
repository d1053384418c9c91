package cloak

// batchTrace is what a traced store (TestingKnobs.Trace, set only by this
// package's tests) reports of every batch that commits: ground truth the
// Tap does not show, for the audits that follow one key across its
// accesses and that check where a batch's real elements land in its
// Write. It is made as the batch is chosen and changes nothing storage
// sees.
type batchTrace struct {
	ID   uint64
	Read []tracedAddr // the batch's addresses, in the order of its Read
}

// tracedAddr is one address of a traced batch.
type tracedAddr struct {
	Addr  string // as storage sees it
	Key   string // the key whose element it holds; "" for none
	Real  bool   // taken for a client's request (a real query)
	Taken int    // its place in the order choose took the batch's addresses
	Write int    // the place, in the batch's Write, of the element read from it
}

// traceOf describes batch b, whose addresses choose took in the order
// order gives (readOrder).
func (s *store) traceOf(b *batch, order []int) *batchTrace {
	t := &batchTrace{ID: b.id, Read: make([]tracedAddr, len(b.addrs))}
	for j, a := range b.addrs {
		t.Read[j] = tracedAddr{Addr: addr(a), Key: s.slots[a].key, Real: s.takenForRequest(a), Taken: order[j], Write: b.perm[j]}
	}
	return t
}

// takenForRequest reports whether address a, taken into the batch being
// chosen, serves a client's request: its key has requests waiting (take
// hands them the batch), whether choose took it from its set's queue or
// as a dummy.
func (s *store) takenForRequest(a uint32) bool {
	sl := s.slots[a]
	return sl.held && s.pending[sl.key] != nil
}
