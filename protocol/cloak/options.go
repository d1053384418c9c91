package cloak

import (
	"fmt"
	"math"
	"time"

	"github.com/jonboulle/clockwork"
)

// Options are Cloak's parameters (Cloak Secs. 4, 6 and 7.1). A zero field
// takes the default its `default` tag states, scaled to the store's
// capacity N (see EnsureDefaults).
type Options struct {
	// B1 is b_1, the budget of the most recent reuse-distance set; with S
	// and N it fixes every budget and the batch size beta (Algorithm 3).
	B1 int `opt:"b_1, the budget of the most recent reuse-distance set; with S it fixes every budget and the batch size beta." default:"ceil(433*sqrt(N/10^6))"`
	// Beta, when B1 is zero, asks for the largest b_1 whose batch size is
	// at most Beta; after EnsureDefaults it is the batch size beta.
	Beta int `opt:"Instead of B1: the largest b_1 whose batch size is at most Beta." default:"unset (B1 decides)"`
	// S is the Zipf exponent of the budgets.
	S float64 `opt:"Zipf exponent of the budgets, b_d = ceil(b_1/d^S)." default:"1"`
	// Delta is the batch interval: a batch of exactly beta addresses
	// leaves every Delta, whether or not clients are active.
	Delta time.Duration `opt:"Batch interval: exactly beta addresses leave every Delta, busy or idle." default:"20ms"`
	// Cache is the number of entries of the proxy's cache of recent
	// values.
	Cache int `opt:"Entries of the proxy's cache of recent values." default:"1000"`
	// Pending bounds the keys with requests waiting for a batch; a request
	// that would add one more waits for a batch to complete. The default
	// tag's is the paper's queue coefficient of 2.
	Pending int `opt:"Keys with requests waiting for a batch; a request that would add one waits." default:"2*beta"`

	// TestingKnobs are hooks for tests, never options.
	TestingKnobs TestingKnobs
}

// TestingKnobs are hooks for tests. They are no options: kv/options sets
// only the int, float64 and time.Duration fields of Options itself, so
// --opt cannot reach them, and a store never records them.
type TestingKnobs struct {
	// Seed, when set, makes the store's random choices reproducible.
	Seed *[32]byte
	// Leak injects a flaw on purpose, to show that an audit catches it
	// (leak.go); zero is the protocol as specified. Outside this package
	// only tests name a leak (through export_test.go); the oblivkv_leaks
	// build chooses one from the environment (leak_env.go).
	Leak leak
	// Trace receives every batch that commits, as trace.go describes it,
	// with the store's lock held (it must not call the store): the ground
	// truth of the audits that follow one key and place a batch's real
	// elements.
	Trace func(batchTrace)
	// Clock, when set, is the clock the batches run on, one every Delta,
	// instead of the real one: a driver that advances a
	// clockwork.FakeClock itself gives storage the same schedule on a
	// loaded machine as on an idle one (the obliviousness audits:
	// `oblivkv audit` and the tests).
	Clock clockwork.Clock
}

// The paper's parameters (Sec. 7.1 and its artifact): b_1 = 433 at N = 1M
// gives beta = 3999 with S = 1; a 20 ms interval and a cache of 1000.
const (
	paperN         = 1_000_000
	paperB1        = 433
	DefaultS       = 1.0
	DefaultDelta   = 20 * time.Millisecond
	DefaultCache   = 1000
	pendingPerBeta = 2
)

// EnsureDefaults returns o with its zero fields at their defaults for a
// store of capacity n, and B1 and Beta at the budget b_1 and the batch
// size beta the store runs with: public parameters, which the audit checks
// every batch against. B1 is Beta's largest b_1 when Beta is given (zero
// when none fits it, for Validate to report); otherwise it scales with n:
// b_1 = ceil(433*sqrt(n/1M)), which keeps the paper's ratio of beta to its
// lower bound sqrt(2N) (about 2.8) at every size: beta is 3999 at n = 1M
// and 871 at n = 2^16.
func (o Options) EnsureDefaults(n int) Options {
	if o.S == 0 {
		o.S = DefaultS
	}
	if o.Delta == 0 {
		o.Delta = DefaultDelta
	}
	if o.Cache == 0 {
		o.Cache = DefaultCache
	}
	switch {
	case o.B1 == 0 && o.Beta == 0:
		o.B1 = int(math.Ceil(paperB1 * math.Sqrt(float64(n)/paperN)))
		o.Beta = batchSize(n, o.B1, o.S)
	case o.B1 == 0:
		if o.B1 = b1ForBeta(n, o.Beta, o.S); o.B1 > 0 {
			o.Beta = batchSize(n, o.B1, o.S)
		}
	case o.Beta == 0:
		o.Beta = batchSize(n, o.B1, o.S)
	}
	if o.Pending == 0 {
		o.Pending = pendingPerBeta * o.Beta
	}
	return o
}

// Validate reports options, defaults applied, that a store of capacity n
// cannot run with.
func (o Options) Validate(n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("cloak: capacity must be at least 1, got %d", n)
	case o.B1 < 0 || o.Beta < 0 || o.Cache < 0 || o.Pending < 0:
		return fmt.Errorf("cloak: B1, Beta, Cache and Pending must not be negative, got B1=%d Beta=%d Cache=%d Pending=%d", o.B1, o.Beta, o.Cache, o.Pending)
	case !(o.S > 0) || math.IsInf(o.S, 0):
		return fmt.Errorf("cloak: the Zipf exponent S must be positive and finite, got %v", o.S)
	case o.Delta < 0:
		return fmt.Errorf("cloak: Delta must be positive, got %v", o.Delta)
	case o.B1 == 0:
		return fmt.Errorf("cloak: no budgets for %d addresses fit a batch of %d; the smallest batch is %d (about sqrt(2N))", n, o.Beta, batchSize(n, 1, o.S))
	case o.B1 > n:
		return fmt.Errorf("cloak: B1=%d is larger than the capacity %d", o.B1, n)
	case o.Beta != batchSize(n, o.B1, o.S):
		return fmt.Errorf("cloak: set B1 or Beta, not both (B1=%d makes batches of %d, Beta=%d)", o.B1, batchSize(n, o.B1, o.S), o.Beta)
	}
	return nil
}

// BudgetsFor returns the budgets b_1, b_2, ... of a store of capacity n
// opened with o: public parameters, which the audit checks every batch
// against.
func (o Options) BudgetsFor(n int) ([]int, error) {
	o = o.EnsureDefaults(n)
	if err := o.Validate(n); err != nil {
		return nil, err
	}
	return Budgets(n, o.B1, o.S), nil
}

// Budgets is Algorithm 3 (Sec. 6): b_d = ceil(b_1 / d^s) for d = 1, 2, ...
// (at least 1) until the sets they imply hold n addresses, sum_d d*b_d >=
// n. Set d holds beta - sum_{i<d} b_i addresses when a batch is formed, so
// the sets hold sum_d d*b_d addresses in all (DESIGN.md Sec. 5). The
// paper's text lost the rounding; ceil reproduces its batch sizes exactly
// (3999 at N = 1M and 3744 at N = 701,317 with b_1 = 433, s = 1;
// TestBudgetsMatchPaper).
func Budgets(n, b1 int, s float64) []int {
	var b []int
	for covered := 0; covered < n; {
		d := len(b) + 1
		bd := max(1, int(math.Ceil(float64(b1)/math.Pow(float64(d), s)-1e-9)))
		b = append(b, bd)
		covered += d * bd
	}
	return b
}

// b1ForBeta returns the largest b_1 whose batch size is at most beta, or
// 0 if there is none.
func b1ForBeta(n, beta int, s float64) int {
	if beta < batchSize(n, 1, s) {
		return 0
	}
	lo, hi := 1, n // batchSize(n, lo, s) <= beta
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if batchSize(n, mid, s) <= beta {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// batchSize is beta, the batch size of the budgets of b1 and s for n
// addresses.
func batchSize(n, b1 int, s float64) int { return sum(Budgets(n, b1, s)) }

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}
