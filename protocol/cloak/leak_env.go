//go:build oblivkv_leaks

package cloak

import "github.com/oblivkv/oblivkv/internal/testsupport/leakenv"

// The leaks OBLIVKV_LEAK may choose, in a build with the oblivkv_leaks
// tag only.
func init() {
	envLeak = leakenv.Hook("cloak", map[string]leak{
		"write_back_in_place":   leakWriteBackInPlace,
		"public_tie_order":      leakPublicTieOrder,
		"skip_idle":             leakSkipIdle,
		"early_when_full":       leakEarlyWhenFull,
		"drain_queue":           leakDrainQueue,
		"checkpoint_by_records": leakCheckpointByRecords,
		"keyed_read_order":      leakKeyedReadOrder,
		"keyed_write_back":      leakKeyedWriteBack,
	})
}
