//go:build oblivkv_leaks

package waffle

import "github.com/oblivkv/oblivkv/internal/testsupport/leakenv"

// The leaks OBLIVKV_LEAK may choose, in a build with the oblivkv_leaks
// tag only.
func init() {
	envLeak = leakenv.Hook("waffle", map[string]leak{
		"real_keeps_id":             leakRealKeepsID,
		"read_in_plan_order":        leakReadInPlanOrder,
		"dummies_written_first":     leakDummiesWrittenFirst,
		"fixed_fill":                leakFixedFill,
		"random_fakes":              leakRandomFakes,
		"victims_in_eviction_order": leakVictimsInEvictionOrder,
		"keyed_id_prefix":           leakKeyedIDPrefix,
	})
}
