package cloak_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/cloak"
)

// TestReplayCatchesUnversionedSeal runs the contract's replay case on a
// running store (kvtest.TamperReplay): it passes as the protocol is, and
// fails when an element's seal leaves out the batch that wrote it
// (leakUnversionedSeal). The case puts back, at their own addresses, the
// elements earlier batches wrote there: without the batch id in the seal
// they open, and the store answers with values older than the latest
// acknowledged ones, or takes a deleted key's older element for it; it
// reads replayed elements and no Get reports the tampering. The stores
// cache one value, so that Gets wait for the batches that read their keys'
// elements, and an older value shows.
func TestReplayCatchesUnversionedSeal(t *testing.T) {
	uncached := fast
	uncached.Cache = 1
	for _, r := range kvtest.TamperReplay(t, contractConfig(uncached), kvtest.Mem()) {
		if err := r.Err(); err != nil {
			t.Errorf("as the protocol is: %v", err)
		}
	}
	leaky := uncached
	leaky.TestingKnobs.Leak = cloak.LeakUnversionedSeal
	for _, r := range kvtest.TamperReplay(t, contractConfig(leaky), kvtest.Mem()) {
		t.Logf("unversioned seal: %s: the store read %d of them; %d of %d Gets reported kv.ErrTampered; %d went wrong, e.g. %v",
			r.What, r.Read, r.Detected, r.Gets, len(r.Wrong), r.Wrong[:min(1, len(r.Wrong))])
		if r.Read == 0 || r.Detected > 0 {
			t.Errorf("unversioned seal: the replay case did not fail decisively: %s: read %d replayed elements, %d Gets reported kv.ErrTampered",
				r.What, r.Read, r.Detected)
		}
	}
}
