//go:build !soak

package main

// crashKills is how many times each run of TestCrashRecovery kills the
// server (60 with the soak build tag).
const crashKills = 5
