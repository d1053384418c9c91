//go:build oblivkv_leaks

package oblivistore

import "github.com/oblivkv/oblivkv/internal/testsupport/leakenv"

// The leaks OBLIVKV_LEAK may choose, in a build with the oblivkv_leaks
// tag only.
func init() {
	envLeak = leakenv.Hook("oblivistore", map[string]leak{
		"repeat_reads_real": leakRepeatReadsReal,
		"skips_empty_reads": leakSkipsEmptyReads,
		"stops_at_real":     leakStopsAtReal,
		"keyed_partition":   leakKeyedPartition,
		"level_unpermuted":  leakLevelUnpermuted,
		"dummies_in_order":  leakDummiesInOrder,
	})
}
