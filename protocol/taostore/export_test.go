package taostore

// Seeded returns o with reproducible leaf choices, for audits with fixed
// seeds.
func Seeded(o Options, seed byte) Options {
	var s [32]byte
	s[0] = seed
	o.seed = &s
	return o
}

// Released returns o reporting, under the store's lock, the arrival
// number (0 for the first request) of every reply the Sequencer lets out,
// in the order it lets them out.
func Released(o Options, fn func(arrival uint64)) Options {
	o.released = fn
	return o
}
