package cloak

// leak is a flaw injected on purpose, to show that an audit catches it
// (audit_test.go). Only this package's tests set Options.leak; the zero
// value, noLeak, is the protocol as specified, and nothing outside the
// package can choose another.
type leak uint8

const (
	noLeak leak = iota
	// leakWriteBackInPlace: the write-back skips the permutation and puts
	// every element back at the address it was read from, as if
	// re-encryption alone hid it. A key read in every batch then stays at
	// one address, read in every batch.
	leakWriteBackInPlace
	// leakPublicTieOrder: a new set keeps its members in the order of the
	// Write that made it, and dummies are chosen among equal timestamps in
	// that order: they are the set's first unread addresses in storage's
	// own order, and a real query shows as an address beyond them.
	leakPublicTieOrder
	// leakSkipIdle: a tick with no request waiting sends no batch, as if
	// an idle batch were wasted work.
	leakSkipIdle
	// leakEarlyWhenFull: a batch leaves at once when the pending map
	// fills, instead of the requests waiting for the next tick.
	leakEarlyWhenFull
	// leakDrainQueue: a batch takes every key waiting in a set's queue,
	// beyond the set's budget, so that no request waits for a second
	// batch; a set drained so runs short of its budget in later batches,
	// which take what it has left.
	leakDrainQueue
	// leakCheckpointByRecords: a checkpoint is due every so many journal
	// records (durable.Log.Due), client writes included, instead of every
	// so many batches: its anchor write then tells storage how much the
	// clients wrote.
	leakCheckpointByRecords
	// leakUnversionedSeal: an element's seal binds its address but not
	// the batch that wrote it, as if re-encryption alone made it fresh:
	// storage can put back an element an earlier batch wrote at that
	// address, and the store takes it for the current one.
	leakUnversionedSeal
)

// inPlace is leakWriteBackInPlace's permutation of n elements: none moves.
func inPlace(n int) []int {
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	return perm
}

// idle reports whether no request waits for a batch (leakSkipIdle).
func (s *store) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) == 0 && s.retry == nil
}

// askEarly is leakEarlyWhenFull: it asks the loop for a batch now.
func (s *store) askEarly() {
	select {
	case s.early <- struct{}{}:
	default:
	}
}

// drain is leakDrainQueue: it takes every key of queue whose address is
// not yet in b.
func (s *store) drain(b *batch, queue []string) {
	for _, k := range queue {
		if a := s.where[k]; !s.slots[a].inflight {
			s.take(b, a)
		}
	}
}

// envLeak returns l: the protocol as given. Only in builds with the
// oblivkv_leaks tag, leak_env.go replaces it with the leak the
// environment chooses (internal/leakenv), so a test can show `oblivkv
// audit` catching it.
var envLeak = func(l leak) (leak, error) { return l, nil }
