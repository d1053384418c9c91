package workload

import (
	"fmt"
	"math/rand/v2"
)

// Hotspot is YCSB's HotspotIntegerGenerator: the first HotSetFraction of
// the records (records 0..hot-1) receive HotOpFraction of the operations,
// uniformly; the rest receive the remainder, uniformly.
type Hotspot struct {
	hot, cold uint64
	opFrac    float64
}

// NewHotspot builds the hotspot distribution over n records.
func NewHotspot(n uint64, setFrac, opFrac float64) (*Hotspot, error) {
	if setFrac < 0 || setFrac > 1 || opFrac < 0 || opFrac > 1 {
		return nil, fmt.Errorf("workload: hotspot fractions must be in [0, 1], got set %v, ops %v", setFrac, opFrac)
	}
	hot := uint64(float64(n) * setFrac)
	return &Hotspot{hot: hot, cold: n - hot, opFrac: opFrac}, nil
}

// Name implements Distribution.
func (*Hotspot) Name() string { return "hotspot" }

// HotSet is the number of hot records (records 0..HotSet()-1).
func (h *Hotspot) HotSet() uint64 { return h.hot }

// Worker implements Distribution.
func (h *Hotspot) Worker(_ int, r *rand.Rand) Chooser {
	return chooserFunc(func() uint64 {
		if h.cold == 0 || (h.hot > 0 && r.Float64() < h.opFrac) {
			return r.Uint64N(h.hot)
		}
		return h.hot + r.Uint64N(h.cold)
	})
}
