package tree_test

import (
	"strconv"
	"testing"

	"github.com/oblivkv/oblivkv/kv/kvtest"
	_ "github.com/oblivkv/oblivkv/protocol/pathoram"
	_ "github.com/oblivkv/oblivkv/protocol/taostore"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// TestMoveCatchesUnboundAddress runs the contract's move case on a running
// store (kvtest.TamperMove) for every protocol built on the Codec: it
// passes with the Codec as it is, and fails when the Codec leaves the
// bucket's address out of a slot's seal (leakUnboundAddress). The case
// moves sealed buckets (Ring ORAM: slots, to the same index of another
// bucket) between addresses that storage saw written alike, so their
// versions agree: only the address in the seal tells them apart, and
// without it the store takes a moved bucket for its own.
func TestMoveCatchesUnboundAddress(t *testing.T) {
	for _, cfg := range []kvtest.Config{
		{Protocol: "pathoram", Integrity: true},
		{Protocol: "taostore", Integrity: true},
		{Protocol: "treebeard", Integrity: true, Cached: treebeard.IsMetaAddr, AddrKind: func(a string) string {
			i, _ := treebeard.SlotIndex(a)
			return strconv.Itoa(i)
		}},
	} {
		t.Run(cfg.Protocol, func(t *testing.T) {
			for _, r := range kvtest.TamperMove(t, cfg, kvtest.Mem()) {
				if err := r.Err(); err != nil {
					t.Errorf("as the Codec is: %v", err)
				}
			}
			tree.InjectUnboundAddress(t)
			for _, r := range kvtest.TamperMove(t, cfg, kvtest.Mem()) {
				t.Logf("address unbound: %s: the store read %d of them; %d of %d Gets reported kv.ErrTampered; %d went wrong",
					r.What, r.Read, r.Detected, r.Gets, len(r.Wrong))
				if r.Read == 0 || r.Detected > 0 {
					t.Errorf("address unbound: the move case did not fail decisively: %s: read %d tampered addresses, %d Gets reported kv.ErrTampered",
						r.What, r.Read, r.Detected)
				}
			}
		})
	}
}
