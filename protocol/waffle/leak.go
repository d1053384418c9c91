package waffle

import "container/heap"

// leak is a flaw injected on purpose, to show that an audit catches it
// (oblivious_test.go). Only this package's tests set Options.leak; the
// zero value, noLeak, is the protocol as specified, and nothing outside
// the package can choose another.
type leak uint8

const (
	noLeak leak = iota
	// leakRealKeepsID: a real query leaves its object's timestamp as it
	// was, as if only fake queries needed a fresh one, so the object
	// leaves the cache under the storage id it was read from: storage
	// sees that id written again, and read again.
	leakRealKeepsID
	// leakReadInPlanOrder: the Read lists a batch's addresses in the order
	// chooseReads picked them: the real queries first, then the fake
	// queries on dummies, then those on real objects.
	leakReadInPlanOrder
	// leakDummiesWrittenFirst: the Write lists the re-encrypted dummies
	// first, then the cache victims, in the order writeBack builds it.
	leakDummiesWrittenFirst
	// leakFixedFill: a batch takes f_R as the constant B-R-f_D instead of
	// B-r-f_D (Waffle Sec. 6.2), so a batch with fewer than R real
	// queries (cache hits, repeated keys, a timeout) reads, writes and
	// deletes fewer than B objects.
	leakFixedFill
	// leakRandomFakes: fake queries pick objects on storage at random
	// instead of the least recently accessed (Waffle Sec. 4, Challenge 2),
	// so some stay unread far beyond Theorem 7.1's alpha.
	leakRandomFakes
	// leakFixedSeed: a store opened without a test seed begins its random
	// choices at a constant seed instead of random.Fresh's, so every
	// store makes the same choices and storage can predict them.
	leakFixedSeed
)

// popRandom is leakRandomFakes' pick: it removes a random object on
// storage of one kind from its index and returns it.
func (s *store) popRandom(dummy bool) (ref, bool) {
	if _, ok := s.head(dummy); !ok {
		return ref{}, false
	}
	h := s.index(dummy)
	for {
		i := s.rng.IntN(len(*h))
		rf, ok := s.current(dummy, heap.Remove(h, i).(entry))
		if ok {
			return rf, true
		}
	}
}

// envLeak returns l: the protocol as given. Only in builds with the
// oblivkv_leaks tag, leak_env.go replaces it with the leak the
// environment chooses (internal/leakenv), so a test can show `oblivkv
// audit` catching it.
var envLeak = func(l leak) (leak, error) { return l, nil }
