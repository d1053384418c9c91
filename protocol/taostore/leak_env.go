//go:build oblivkv_leaks

package taostore

import "github.com/oblivkv/oblivkv/internal/testsupport/leakenv"

// The leaks OBLIVKV_LEAK may choose, in a build with the oblivkv_leaks
// tag only.
func init() {
	envLeak = leakenv.Hook("taostore", map[string]leak{
		"repeat_reads_real_path": leakRepeatReadsRealPath,
		"get_keeps_leaf":         leakGetKeepsLeaf,
		"missing_keyed_leaf":     leakMissingKeyedLeaf,
		"put_writes_back":        leakPutWritesBack,
		"unchanged_not_written":  leakUnchangedNotWritten,
		"unordered_replies":      leakUnorderedReplies,
		"keyed_remap":            leakKeyedRemap,
		"chained_remap":          leakChainedRemap,
	})
}
