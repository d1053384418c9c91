//go:build !soak

package main

// rekeyKills is how many times TestRekeyCrashKills kills a rekey (60, and
// on Redis too, with the soak build tag).
const rekeyKills = 10
