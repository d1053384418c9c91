//go:build soak

package main

import (
	"testing"

	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
)

// rekeyKills is how many times TestRekeyCrashKills kills a rekey, and
// rekeyCapacity the capacity of the store it re-keys, under the soak
// build tag.
const (
	rekeyKills    = 60
	rekeyCapacity = 4096
)

// TestRekeyCrashKillsRedis is TestRekeyCrashKills with the store on Redis.
func TestRekeyCrashKillsRedis(t *testing.T) {
	rekeyCrashRun(t, redistest.Start(t))
}
