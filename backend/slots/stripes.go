package slots

import (
	"hash/maphash"
	"slices"
	"sync"
)

// stripeCount is how many locks the addresses are spread over.
const stripeCount = 256

// stripes guard addresses. A call holds the stripes of every address it
// touches while it reads or writes them, read-locked to read and
// write-locked to write, so a Read sees all of a Write or none of it, and
// a conditional write's check and write are one step (a Write that then
// waits for its fsync has let go of them); calls on different addresses
// (the trees of a store, say) mostly run side by side. Stripes are taken
// in increasing order, so two calls never wait on each other in a cycle.
type stripes struct {
	seed  maphash.Seed
	locks [stripeCount]sync.RWMutex
}

func newStripes() *stripes { return &stripes{seed: maphash.MakeSeed()} }

// of returns the stripes of addrs, increasing and distinct.
func (s *stripes) of(addrs []string) []int {
	set := make([]int, len(addrs))
	for i, a := range addrs {
		set[i] = int(maphash.String(s.seed, a) % stripeCount)
	}
	slices.Sort(set)
	return slices.Compact(set)
}

func (s *stripes) lock(set []int) {
	for _, i := range set {
		s.locks[i].Lock()
	}
}

func (s *stripes) unlock(set []int) {
	for _, i := range set {
		s.locks[i].Unlock()
	}
}

func (s *stripes) rlock(set []int) {
	for _, i := range set {
		s.locks[i].RLock()
	}
}

func (s *stripes) runlock(set []int) {
	for _, i := range set {
		s.locks[i].RUnlock()
	}
}
