package tree

import "testing"

// InjectUnboundAddress makes every Codec made until t ends leave the
// bucket's address out of its seals (leakUnboundAddress). t must not run
// in parallel with other tests.
func InjectUnboundAddress(t testing.TB) {
	injected.Store(uint32(leakUnboundAddress))
	t.Cleanup(func() { injected.Store(uint32(noLeak)) })
}
