//go:build oblivkv_leaks

package treebeard

import (
	"github.com/oblivkv/oblivkv/internal/testsupport/leakenv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// The leaks OBLIVKV_LEAK may choose, in a build with the oblivkv_leaks
// tag only.
func init() {
	envLeak = leakenv.Hook("treebeard", map[string]leak{
		"repeat_reads_real_path":     leakRepeatReadsRealPath,
		"missing_keyed_position":     leakMissingKeyedPosition,
		"evict_on_real_reads":        leakEvictOnRealReads,
		"eager_shard_parts":          leakEagerShardParts,
		"dummies_in_order":           leakDummiesInOrder,
		"takeover_forgets_evictions": leakTakeoverForgetsEvictions,
	})
	injectTreeLeak = func(l leak, t *ringoram.Tree) {
		if l == leakDummiesInOrder {
			ringoram.InjectDummiesInOrder(t)
		}
	}
	forgetEvictions = func(g *term, tr *ringoram.Tree) {
		g.view(func() { ringoram.ForgetEvictions(tr) })
	}
}
