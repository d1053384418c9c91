//go:build soak

package main

import (
	"testing"

	"github.com/oblivkv/oblivkv/internal/testsupport/redistest"
)

// rekeyKills is how many times TestRekeyCrashKills kills a rekey under
// the soak build tag.
const rekeyKills = 60

// TestRekeyCrashKillsRedis is TestRekeyCrashKills with the store on Redis.
func TestRekeyCrashKillsRedis(t *testing.T) {
	rekeyCrashRun(t, redistest.Start(t))
}
