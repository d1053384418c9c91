//go:build oblivkv_leaks

package ringoram

// InjectDummiesInOrder makes t's path reads take the lowest unread dummy
// of each bucket (leakDummiesInOrder). It exists only in builds with the
// oblivkv_leaks tag, for the leak environment of the protocols whose
// trees are Ring ORAM trees (protocol/treebeard's leak_env.go), so that a
// test can show `oblivkv audit` catching the leak; a default build has no
// way to inject it.
func InjectDummiesInOrder(t *Tree) { t.leak = leakDummiesInOrder }

// ForgetEvictions makes t's next eviction take the first path again, as
// if it had evicted none, and changes nothing else of its state (its
// copies of the buckets' metadata stay). It exists only in builds with
// the oblivkv_leaks tag, for treebeard's leakTakeoverForgetsEvictions.
func ForgetEvictions(t *Tree) { t.evictions = 0 }
