package kvtest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// SeedEnv names the environment variable that fixes the seed of a test's
// own random choices (Seed), to replay a failed run.
const SeedEnv = "OBLIVKV_TEST_SEED"

// Streams of the PCG generators drawn from one Seed, so that no two uses
// of a seed draw the same numbers: Linearizable's clients take streams 0
// to Clients-1, Jittered's storages those from jitterStream up, and a
// test's own schedule (cmd/oblivkv's kills) ScheduleStream.
const (
	jitterStream   = 1 << 32
	ScheduleStream = 1 << 48
)

// Seed returns the seed of a test's own random choices (an operation mix,
// storage delays, a schedule of kills; never a protocol's, which begin at
// random.Fresh): $OBLIVKV_TEST_SEED when set, else a random one; never 0,
// which LinOptions takes for "pick one". It logs the seed and how to run
// again with it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := rand.Uint64() | 1
	if v := os.Getenv(SeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil || seed == 0 {
			t.Fatalf("%s=%q: want a positive integer (%v)", SeedEnv, v, err)
		}
	}
	t.Logf("test seed %d (%s=%d replays it)", seed, SeedEnv, seed)
	return seed
}
