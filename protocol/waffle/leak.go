package waffle

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"slices"

	"github.com/oblivkv/oblivkv/seal"
)

// leak is a flaw injected on purpose, to show that an audit catches it
// (oblivious_test.go). Tests set it as Options.TestingKnobs.Leak, and the
// oblivkv_leaks build from the environment (leak_env.go); the zero value,
// noLeak, is the protocol as specified. The type is unexported: outside
// the package, only tests name another, through export_test.go.
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
	// leakKeyedReadOrder: the Read lists a batch's objects ordered by a
	// keyed hash of their names (the store's PRF of key or dummy id, which
	// storage cannot compute) in place of a fresh random order, as if a
	// secret order were as good as a random one: an object sits at about
	// the same place of every Read that reads it.
	leakKeyedReadOrder
	// leakKeyedWriteOrder: the Write lists its objects ordered by a keyed
	// hash of their names likewise: an object lands at about the same
	// place of every Write that writes it.
	leakKeyedWriteOrder
	// leakVictimsInEvictionOrder: the Write takes random places, but the
	// real objects the cache evicted fill theirs in increasing order, in
	// the order the cache evicted them (least recently used first), as if
	// only which places they took mattered.
	leakVictimsInEvictionOrder
	// leakRealsInPlanOrder: the Read takes random places, but the real
	// queries fill theirs in increasing order, in the order chooseReads
	// planned them (their keys' first requests' arrival), as if only which
	// places they took mattered.
	leakRealsInPlanOrder
	// leakKeyedIDPrefix: an object's storage id is PRF(key) with the
	// timestamp in place of its last 8 bytes, in the clear, as if an id
	// only had to be unique: every id is still written once and read once,
	// but all the ids of one key share their first bytes.
	leakKeyedIDPrefix
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

// byKeyedHash is the order of leakKeyedReadOrder and
// leakKeyedWriteOrder: the indexes 0..n-1 of objects named by name,
// ordered by a keyed hash of the names.
func (s *store) byKeyedHash(n int, name func(int) ref) []int {
	hash := make([]uint64, n)
	for i := range hash {
		rf := name(i)
		h := s.keys.PRF([]byte("waffle/order"), []byte(rf.Key))
		hash[i] = binary.BigEndian.Uint64(h[:])
	}
	order := identity(n)
	slices.SortFunc(order, func(i, j int) int { return cmp.Compare(hash[i], hash[j]) })
	return order
}

// victimsInEvictionOrder is leakVictimsInEvictionOrder's order of a Write
// of refs, the first dummies of them the dummies read and the rest the
// victims in eviction order: a random order whose places for real
// victims are handed out again in eviction order.
func (s *store) victimsInEvictionOrder(refs []ref, dummies int) []int {
	order := s.rng.Perm(len(refs))
	var places, victims []int
	for j, i := range order {
		if i >= dummies && !refs[i].Dummy {
			places, victims = append(places, j), append(victims, i)
		}
	}
	slices.Sort(victims)
	for k, j := range places {
		order[j] = victims[k]
	}
	return order
}

// realsInPlanOrder is leakRealsInPlanOrder's order of a Read of reads: a
// random order whose places for real queries are handed out again in the
// order of reads, which lists them first, in plan order.
func (s *store) realsInPlanOrder(reads []read) []int {
	order := s.rng.Perm(len(reads))
	var places []int
	for j, i := range order {
		if reads[i].queried() {
			places = append(places, j)
		}
	}
	for k, j := range places {
		order[j] = k
	}
	return order
}

// keyedIDPrefix is leakKeyedIDPrefix's storage id: prf, the PRF of the
// object's name alone, with ts in place of its last 8 bytes.
func keyedIDPrefix(prf [seal.PRFSize]byte, ts uint64) string {
	binary.BigEndian.PutUint64(prf[len(prf)-8:], ts)
	return ObjectPrefix + string(prf[:])
}

// envLeak returns l: the protocol as given. Only in builds with the
// oblivkv_leaks tag, leak_env.go replaces it with the leak the
// environment chooses (internal/testsupport/leakenv), so a test can show `oblivkv
// audit` catching it.
var envLeak = func(l leak) (leak, error) { return l, nil }
