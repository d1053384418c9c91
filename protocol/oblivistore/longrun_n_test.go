//go:build !soak

package oblivistore

// longRunN is TestLongRun's N in the default run: 2^12, whose 10*N
// accesses shuffle each of the 64 partitions about 1,100 times, in about
// a quarter of the CPU time of 2^14 (longrun_soak_test.go).
const longRunN = 1 << 12
