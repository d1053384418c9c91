package kv

// Options is the shape of every protocol's Options type T (pebble's
// names), for a store of capacity n:
//
//   - EnsureDefaults returns the options with each zero field at its
//     default, the value its `default` tag states (see Protocol.Options):
//     the public parameters the store runs with. It never fails; what it
//     cannot make sense of it leaves for Validate.
//   - Validate reports options, defaults applied, that the protocol
//     cannot run with.
//
// Values a protocol derives from its options (Cloak's budgets) come from
// functions of their own, not from EnsureDefaults.
type Options[T any] interface {
	EnsureDefaults(n int) T
	Validate(n int) error
}

// ResolveOptions returns the options a protocol's store of env runs with:
// Env.Options (see OptionsOf) with its defaults for env.Capacity, or the
// error that they cannot be run with.
func ResolveOptions[T Options[T]](protocol string, env Env) (T, error) {
	o, err := OptionsOf[T](protocol, env.Options)
	if err != nil {
		return o, err
	}
	o = o.EnsureDefaults(env.Capacity)
	return o, o.Validate(env.Capacity)
}
