package taostore_test

import (
	"testing"

	"github.com/oblivkv/oblivkv/backend/mem"
	"github.com/oblivkv/oblivkv/internal/testsupport/durabletest"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/taostore"
)

// TestCloseWaitsForABackgroundCheckpoint: a checkpoint that runs in the
// background (requests never wait for one) ends before Close returns,
// even when Close itself fails: a store must touch storage no more once
// closed, or a store opened next over the same storage could see its
// predecessor's anchor land after its own recovery began.
func TestCloseWaitsForABackgroundCheckpoint(t *testing.T) {
	h := durabletest.NewAnchorHolding(mem.New())
	s, j := crashable(t, h, kvtest.NewKeys(t), t.TempDir(), true, taostore.Options{K: 1})
	taostore.CheckpointEvery(s, 1)
	h.PutUntilHeld(t, s)
	j.Crash() // Close's own write-back and checkpoint now fail
	h.CheckCloseWaits(t, s)
}
