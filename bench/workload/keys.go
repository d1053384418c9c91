package workload

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Distribution is a key distribution over a fixed set of records numbered
// 0..n-1. It is built once per run (some precompute tables) and shared by
// every worker and every protocol of the run; it must be immutable.
type Distribution interface {
	// Name is the --distribution name.
	Name() string
	// Worker returns worker id's stream of record numbers, drawing its
	// randomness from r (which belongs to that worker alone).
	Worker(id int, r *rand.Rand) Chooser
}

// Chooser is one worker's stream of record numbers. It is used by one
// goroutine only.
type Chooser interface {
	// Next returns a record number in [0, n).
	Next() uint64
}

// Options tune the distributions; zero fields take the YCSB defaults.
type Options struct {
	// Theta is the zipfian constant of zipfian and latest (default 0.99).
	Theta float64
	// HotSetFraction is the share of records that are hot (default 0.2).
	HotSetFraction float64
	// HotOpFraction is the share of operations on the hot set (default 0.8).
	HotOpFraction float64
	// TemporalExponent is the Zipf exponent s of the temporal generator's
	// reuse distances (default 1, as in Cloak's synthetic workload).
	TemporalExponent float64
	// TraceLength is the number of entries the temporal generator draws
	// before its sequence wraps (default DefaultTraceLength).
	TraceLength int
	// Seed seeds the temporal generator (the run's --seed).
	Seed uint64
}

// Defaults from YCSB's CoreWorkload and generators.
const (
	DefaultTheta          = 0.99
	DefaultHotSetFraction = 0.2
	DefaultHotOpFraction  = 0.8
	// DefaultTemporalExponent is the Zipf exponent of Cloak's synthetic
	// temporal workload (Sec. 7.1).
	DefaultTemporalExponent = 1.0
	// DefaultTraceLength is the temporal generator's length when the run's
	// length is not known in advance (a timed run).
	DefaultTraceLength = 1 << 22
	// MaxTraceLength bounds the temporal generator's length (8 bytes an
	// entry); longer runs wrap.
	MaxTraceLength = 1 << 24
)

func (o Options) withDefaults() Options {
	o.Theta = cmp.Or(o.Theta, DefaultTheta)
	o.HotSetFraction = cmp.Or(o.HotSetFraction, DefaultHotSetFraction)
	o.HotOpFraction = cmp.Or(o.HotOpFraction, DefaultHotOpFraction)
	o.TemporalExponent = cmp.Or(o.TemporalExponent, DefaultTemporalExponent)
	o.TraceLength = min(cmp.Or(o.TraceLength, DefaultTraceLength), MaxTraceLength)
	return o
}

// Distributions returns the names New accepts.
func Distributions() []string { return []string{"uniform", "zipfian", "latest", "hotspot", "temporal"} }

// New builds the distribution called name over n records. A new
// distribution is a new file implementing Distribution (and Sequence, if
// it is one sequence shared by all workers) and one more case here. A
// trace file is not a distribution by name: see ReadTrace.
func New(name string, n uint64, opts Options) (Distribution, error) {
	if n == 0 {
		return nil, fmt.Errorf("workload: a key distribution needs at least one record")
	}
	opts = opts.withDefaults()
	switch strings.ToLower(name) {
	case "uniform":
		return Uniform{N: n}, nil
	case "zipfian":
		return NewScrambledZipfian(n, opts.Theta)
	case "latest":
		return NewLatest(n, opts.Theta)
	case "hotspot":
		return NewHotspot(n, opts.HotSetFraction, opts.HotOpFraction)
	case "temporal":
		return NewTemporal(n, opts.TemporalExponent, opts.TraceLength, opts.Seed)
	}
	return nil, fmt.Errorf("unknown distribution %q (known: %s)", name, strings.Join(Distributions(), ", "))
}

// chooserFunc adapts a closure to Chooser.
type chooserFunc func() uint64

func (f chooserFunc) Next() uint64 { return f() }

// Uniform picks every record with the same probability.
type Uniform struct{ N uint64 }

// Name implements Distribution.
func (Uniform) Name() string { return "uniform" }

// Worker implements Distribution.
func (u Uniform) Worker(_ int, r *rand.Rand) Chooser {
	return chooserFunc(func() uint64 { return r.Uint64N(u.N) })
}

// KeyPrefix begins every benchmark key, as in YCSB.
const KeyPrefix = "user"

// Keys formats record numbers as keys: "user" followed by the record
// number zero-padded to the width of the largest one (YCSB's "ordered"
// key form with zero padding), so every key of a run has the same length
// and key length never tells records apart. Hot records are spread over
// the key space by the distributions themselves (the scrambled zipfian),
// not by hashing the key.
//
// A trace's Keys (see KeysFor) instead name record i by the trace's i-th
// distinct key, in order of first appearance.
type Keys struct {
	width int
	names []string // a trace's keys, or nil
}

// NewKeys returns the key format for n records.
func NewKeys(n uint64) Keys {
	w := len(strconv.FormatUint(max(n, 1)-1, 10))
	return Keys{width: w}
}

// KeysFor returns the keys of d's n records: a trace's own keys (record i
// is its i-th distinct key), else NewKeys(n).
func KeysFor(d Distribution, n uint64) Keys {
	if t, ok := d.(*Trace); ok {
		return Keys{names: t.keys}
	}
	return NewKeys(n)
}

// Key returns the key of record i, in one allocation (none for named
// keys).
func (k Keys) Key(i uint64) string {
	if k.names != nil {
		return k.names[i]
	}
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], i, 10)
	var b strings.Builder
	b.Grow(len(KeyPrefix) + max(k.width, len(d)))
	b.WriteString(KeyPrefix)
	for range k.width - len(d) {
		b.WriteByte('0')
	}
	b.Write(d)
	return b.String()
}

// Value fills a new slice of size bytes with random bytes from r.
func Value(r *rand.Rand, size int) []byte {
	v := make([]byte, size)
	for i := 0; i < size; i += 8 {
		x := r.Uint64()
		for j := i; j < min(i+8, size); j++ {
			v[j] = byte(x)
			x >>= 8
		}
	}
	return v
}
