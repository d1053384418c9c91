//go:build soak

package oblivistore

// longRunN is TestLongRun's N under the soak build tag: 2^14, whose 10*N
// accesses shuffle each of the 128 partitions about 2,600 times, with
// the eviction cache's bound (8*sqrt(N) and more) half as large a share
// of N as at 2^12.
const longRunN = 1 << 14
