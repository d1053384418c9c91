//go:build oblivkv_leaks

package pathoram

import "github.com/oblivkv/oblivkv/internal/testsupport/leakenv"

// The leaks OBLIVKV_LEAK may choose, in a build with the oblivkv_leaks
// tag only.
func init() {
	envLeak = leakenv.Hook("pathoram", map[string]leak{
		"get_keeps_leaf":        leakGetKeepsLeaf,
		"missing_keyed_leaf":    leakMissingKeyedLeaf,
		"unchanged_not_written": leakUnchangedNotWritten,
		"keyed_remap":           leakKeyedRemap,
		"chained_remap":         leakChainedRemap,
		"inflight_not_read":     leakInflightNotRead,
	})
}
