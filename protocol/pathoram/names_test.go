package pathoram

import (
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

// TestEarlierCheckpointNamesNoKeys: a store whose checkpoint is of
// version 1, which holds no names, opens and serves, and names its keys
// only once each is written again.
func TestEarlierCheckpointNamesNoKeys(t *testing.T) {
	kvtest.CheckEarlierUnnamed(t, open, kv.Env{Capacity: 64, ValueSize: 16}, func(st kv.Store) {
		s := st.(*store)
		s.mu.Lock()
		defer s.mu.Unlock()
		clear(s.o.names)
		v2 := s.encodeState() // its names last: a count of 0
		v1 := append([]byte(stateMagicV1), v2[len(stateMagic):len(v2)-1]...)
		if err := s.log.Checkpoint(t.Context(), v1, s.log.Last()); err != nil {
			t.Fatal(err)
		}
	})
}
