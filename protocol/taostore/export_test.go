package taostore

// Seeded returns o with reproducible leaf choices, for audits with fixed
// seeds.
func Seeded(o Options, seed byte) Options {
	var s [32]byte
	s[0] = seed
	o.seed = &s
	return o
}
