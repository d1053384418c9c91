// Package workload generates what a benchmark asks of a store: which
// operation comes next (a YCSB mix), which record it touches (a key
// distribution), the record's key string and a value to write.
//
// It owns the YCSB core workloads A, B, C and F, the key distributions
// uniform, zipfian (YCSB's scrambled zipfian), latest (YCSB's skewed
// latest) and hotspot, and two key sequences shared by all the workers of
// a run (Sequence): Cloak's temporal generator and the replay of a trace
// file. Everything is deterministic given the random source it is handed:
// a run seeds one math/rand/v2 PCG per worker, so the same seed replays
// the same per-worker streams, and a Sequence is fixed by its seed or
// file.
//
// It must never touch a store, a clock or global random state: timing and
// execution belong to package bench.
package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Op is one YCSB operation.
type Op uint8

// The operations of the YCSB core workloads this package offers.
const (
	// Read gets one record.
	Read Op = iota
	// Update overwrites one record with a new value.
	Update
	// ReadModifyWrite reads one record, then overwrites it: one YCSB
	// operation made of a Get and a Put.
	ReadModifyWrite
	numOps
)

func (o Op) String() string {
	switch o {
	case Read:
		return "read"
	case Update:
		return "update"
	case ReadModifyWrite:
		return "rmw"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Mix is a YCSB operation mix: the proportion of each Op.
type Mix struct {
	Name string
	// Proportions indexed by Op; they sum to 1.
	Proportions [numOps]float64
}

// The YCSB core workloads without inserts or scans.
var mixes = []Mix{
	{Name: "A", Proportions: [numOps]float64{Read: 0.5, Update: 0.5}},
	{Name: "B", Proportions: [numOps]float64{Read: 0.95, Update: 0.05}},
	{Name: "C", Proportions: [numOps]float64{Read: 1}},
	{Name: "F", Proportions: [numOps]float64{Read: 0.5, ReadModifyWrite: 0.5}},
}

// Mixes returns the names of the known workloads.
func Mixes() []string {
	names := make([]string, len(mixes))
	for i, m := range mixes {
		names[i] = m.Name
	}
	return names
}

// MixByName returns the YCSB workload called name (A, B, C or F; case
// does not matter).
func MixByName(name string) (Mix, error) {
	for _, m := range mixes {
		if strings.EqualFold(m.Name, name) {
			return m, nil
		}
	}
	return Mix{}, fmt.Errorf("unknown workload %q (known: %s)", name, strings.Join(Mixes(), ", "))
}

// Next draws the next operation.
func (m Mix) Next(r *rand.Rand) Op { return m.pick(r.Float64()) }

// entry draws the operation of entry i of a shared key sequence (a trace
// without operations, or the temporal generator) from a hash of (seed, i):
// see Cursor.Next.
func (m Mix) entry(seed, i uint64) Op {
	return m.pick(float64(splitmix64(seed^splitmix64(i))>>11) / (1 << 53))
}

// pick maps u, uniform in [0, 1), to an operation.
func (m Mix) pick(u float64) Op {
	last := Read
	for op, p := range m.Proportions {
		if p <= 0 {
			continue
		}
		last = Op(op)
		if u < p {
			return last
		}
		u -= p
	}
	return last // rounding: the last operation with a share
}

// Writes reports whether the mix ever writes.
func (m Mix) Writes() bool {
	return m.Proportions[Update] > 0 || m.Proportions[ReadModifyWrite] > 0
}

// splitmix64 is the finaliser of SplitMix64 (Steele, Lea and Flood): a
// bijective mix of x's bits.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
