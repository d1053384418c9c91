package waffle

import (
	"fmt"
	"math"
	"time"

	"github.com/jonboulle/clockwork"
)

// Options are Waffle's parameters (Waffle, Table 1). A zero field takes the
// default its `default` tag states, scaled to the store's capacity N (see
// EnsureDefaults).
type Options struct {
	// B is the batch size: the number of objects read (and written) per
	// batch.
	B int `opt:"Objects read, and written, per batch." default:"5k, k = clamp(round(N/2000), 1, 500)"`
	// R is the largest number of client requests in one batch.
	R int `opt:"Most client requests per batch." default:"2k"`
	// FD is f_D, the number of fake queries on dummy objects per batch.
	FD int `opt:"Fake queries on dummy objects per batch (f_D)." default:"k"`
	// D is the number of dummy objects of a full store.
	D int `opt:"Dummy objects of a full store." default:"ceil(FD*(N-1)/(B-R-FD)), at least C+B-N"`
	// C is the cache size, in objects.
	C int `opt:"Cache size, in objects." default:"max(ceil(2% of N), B-FD+R)"`
	// Timeout closes a batch when fewer than R requests are waiting; the
	// free slots become fake queries on real objects.
	Timeout time.Duration `opt:"Closes a batch when fewer than R requests wait; the free slots become fake queries." default:"2ms"`

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
	// Trace receives each batch as trace.go describes it, after the
	// batch's backend calls succeeded, from the batching goroutine: the
	// objects it read from and wrote to storage, in the order of its Read
	// and of its Write.
	Trace func(batchTrace)
	// Clock, when set, is the clock a batch's Timeout runs on, instead of
	// the real one: a test that advances a clockwork.FakeClock itself
	// decides which requests share a batch.
	Clock clockwork.Clock
}

// The paper's parameters (Sec. 8, N = 1M): B=2500, R=1000, f_D=500 and a
// cache of 2% of N. They are in the ratio B:R:f_D = 5:2:1.
const (
	paperN         = 1_000_000
	paperK         = 500 // f_D at N = paperN
	DefaultTimeout = 2 * time.Millisecond
)

// EnsureDefaults returns o with its zero fields at their defaults for a
// store of capacity n: the public parameters the store runs with, which
// an audit checks storage's view against.
//
// Scaling rule: k = clamp(round(n*500/1M), 1, 500) and, keeping the paper's
// ratios, B = 5k, R = 2k, f_D = k (so f_R = B-R-f_D >= 2k >= 2; at n >= 1M
// these are the paper's 2500, 1000, 500). Then, from the final B, R, f_D:
//
//   - C = max(ceil(2% of n), B - f_D + R), the paper's cache size but never
//     below its assumption C >= B - f_D + R (Algorithm 1);
//   - D = ceil(f_D (n-1) / (B-R-f_D)), so that (n-1)/(B-R-f_D) = D/f_D
//     (the two terms of Theorem 7.1 match), raised to C + B - n when that
//     is larger, so that a full store keeps at least B objects on storage
//     outside the cache (B <= n + D - C).
func (o Options) EnsureDefaults(n int) Options {
	k := min(max(int(math.Round(float64(n)*paperK/paperN)), 1), paperK)
	if o.B == 0 {
		o.B = 5 * k
	}
	if o.R == 0 {
		o.R = 2 * k
	}
	if o.FD == 0 {
		o.FD = k
	}
	if o.C == 0 {
		o.C = max(int(math.Ceil(0.02*float64(n))), o.B-o.FD+o.R)
	}
	if o.D == 0 {
		if fr := o.B - o.R - o.FD; fr >= 1 {
			o.D = (o.FD*(n-1) + fr - 1) / fr
		}
		o.D = max(o.D, o.C+o.B-n)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// Validate reports the combinations Algorithm 1 cannot run with, for a
// store of capacity n.
func (o Options) Validate(n int) error {
	switch {
	case o.B < 1 || o.R < 1 || o.FD < 0 || o.D < 0 || o.C < 0:
		return fmt.Errorf("waffle: B and R must be at least 1 and f_D, D, C at least 0, got B=%d R=%d f_D=%d D=%d C=%d", o.B, o.R, o.FD, o.D, o.C)
	case o.B-o.R-o.FD < 1:
		return fmt.Errorf("waffle: f_R = B-R-f_D must be at least 1, got %d (B=%d R=%d f_D=%d)", o.B-o.R-o.FD, o.B, o.R, o.FD)
	case o.D < o.R:
		// An insert takes a dummy's place (Sec. 6.2); a batch of R inserts
		// into a full store needs R dummies.
		return fmt.Errorf("waffle: D=%d dummies cannot serve a batch of R=%d inserts into a full store; D must be at least R", o.D, o.R)
	case o.C < o.B-o.FD+o.R:
		return fmt.Errorf("waffle: the cache C=%d is smaller than B-f_D+R=%d (Algorithm 1's assumption)", o.C, o.B-o.FD+o.R)
	case o.B > n+o.D-o.C:
		return fmt.Errorf("waffle: B=%d is larger than the N+D-C=%d objects a full store keeps on storage (N=%d D=%d C=%d)", o.B, n+o.D-o.C, n, o.D, o.C)
	case o.Timeout < 0:
		return fmt.Errorf("waffle: Timeout must not be negative, got %v", o.Timeout)
	}
	return nil
}

// TheoreticalAlpha is Theorem 7.1's bound for a store of capacity n (with
// the defaults of opts applied): every object written to storage is read
// again within alpha batches, alpha = ceil(max((N-1)/(B-R-f_D), D/f_D))
// with 0/0 = 0. It is +Inf when f_D = 0 < D. It holds for a full store;
// with fewer keys the spare capacity is held by extra dummies and the
// dummy term grows to (N+D-keys)/f_D (Sec. 6.2, inserts and deletes).
func TheoreticalAlpha(opts Options, n int) float64 {
	o := opts.EnsureDefaults(n)
	reals := float64(n-1) / float64(o.B-o.R-o.FD)
	dummies := 0.0
	switch {
	case o.FD > 0:
		dummies = float64(o.D) / float64(o.FD)
	case o.D > 0:
		dummies = math.Inf(1)
	}
	return math.Ceil(max(reals, dummies))
}

// TheoreticalBeta is Theorem 7.2's bound for a store of capacity n: an
// object read from storage is written back no earlier than beta batches
// later, beta = floor(C/(B-f_D+R) - 1).
func TheoreticalBeta(opts Options, n int) float64 {
	o := opts.EnsureDefaults(n)
	return math.Floor(float64(o.C)/float64(o.B-o.FD+o.R) - 1)
}
