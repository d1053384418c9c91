package cloak

import (
	"cmp"
	"encoding/binary"
	"slices"
)

// leak is a flaw injected on purpose, to show that an audit catches it
// (audit_test.go). Tests set it as Options.TestingKnobs.Leak, and the
// oblivkv_leaks build from the environment (leak_env.go); the zero value,
// noLeak, is the protocol as specified. The type is unexported: outside
// the package, only tests name another, through export_test.go.
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
	// leakKeyedReadOrder: the Read lists the batch's addresses ordered by
	// a keyed hash of the keys they hold (the store's PRF, which storage
	// cannot compute) in place of a fresh random order, as if a secret
	// order were as good as a random one. A key then sits at about the
	// same place of every Read that reads it.
	leakKeyedReadOrder
	// leakKeyedWriteBack: the write-back permutation orders the batch's
	// elements by a keyed hash of their keys, a deterministic shuffle that
	// storage cannot compute: a key's element lands at about the same
	// place of every Write.
	leakKeyedWriteBack
	// leakRealsInTakeOrder: the write-back draws a random permutation but
	// gives the elements of the batch's real queries its places for them
	// in increasing order, in the order choose took them (set by set, each
	// set's queue in arrival order), as if only which places they held
	// mattered.
	leakRealsInTakeOrder
	// leakFixedSeed: a store opened without a test seed begins its random
	// choices at a constant seed instead of random.Fresh's, so every
	// store makes the same choices and storage can predict them.
	leakFixedSeed
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

// byKeyedHash is the order of leakKeyedReadOrder and
// leakKeyedWriteBack: the indexes of addrs ordered by a keyed hash of the
// key each address holds (addresses that hold none, and equal hashes, in
// a random order).
func (s *store) byKeyedHash(addrs []uint32) []int {
	hash := make([]uint64, len(addrs))
	for i, a := range addrs {
		h := s.keys.PRF([]byte("cloak/order"), []byte(s.slots[a].key))
		hash[i] = binary.BigEndian.Uint64(h[:])
	}
	order := s.rng.Perm(len(addrs))
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(hash[i], hash[j]) })
	return order
}

// rankOf is leakKeyedWriteBack's permutation: element order[r] goes to
// place r.
func rankOf(order []int) []int {
	perm := make([]int, len(order))
	for r, i := range order {
		perm[i] = r
	}
	return perm
}

// realsInTakeOrder is leakRealsInTakeOrder's permutation of addrs, listed
// in the Read's order (order[j] is the j-th address's place in the order
// choose took them): a random permutation whose places for the real
// queries' elements are handed out again, in increasing order, in the
// order choose took those addresses.
func (s *store) realsInTakeOrder(addrs []uint32, order []int) []int {
	perm := s.rng.Perm(len(addrs))
	var reals, places []int
	for j, a := range addrs {
		if s.takenForRequest(a) {
			reals, places = append(reals, j), append(places, perm[j])
		}
	}
	slices.SortFunc(reals, func(i, j int) int { return cmp.Compare(order[i], order[j]) })
	slices.Sort(places)
	for k, j := range reals {
		perm[j] = places[k]
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
// environment chooses (internal/testsupport/leakenv), so a test can show `oblivkv
// audit` catching it.
var envLeak = func(l leak) (leak, error) { return l, nil }
