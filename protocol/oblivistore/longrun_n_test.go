//go:build !soak

package oblivistore

// longRunN is TestLongRun's N: 2^12 in the default run, where a run of
// 10*N accesses cycles every partition's levels through as many shuffles
// as at 2^14 (longrun_soak_test.go) in a quarter of the time.
const longRunN = 1 << 12
