//go:build !soak

package main

// rekeyKills is how many times TestRekeyCrashKills kills a rekey, and
// rekeyCapacity the capacity of the store it re-keys (60 kills of a store
// of 2^12, and on Redis too, with the soak build tag).
const (
	rekeyKills    = 10
	rekeyCapacity = 1024
)
