//go:build soak

package main

// crashKills is how many times each run of TestCrashRecovery kills the
// server: 60 under the soak build tag, about a minute per protocol and
// storage.
const crashKills = 60
