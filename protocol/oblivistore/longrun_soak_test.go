//go:build soak

package oblivistore

// longRunN is TestLongRun's N under the soak build tag: 2^14, where the
// eviction cache's bound (8*sqrt(N) and more) is four times tighter
// against N than at the default run's 2^12.
const longRunN = 1 << 14
