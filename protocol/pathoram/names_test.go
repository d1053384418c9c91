package pathoram

import (
	"encoding/binary"
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
		s.turns.exclusive()
		defer s.turns.done()
		v1 := s.appendParams([]byte(stateMagicV1))
		for id, leaf := range s.o.pos { // a position, with no name
			v1 = binary.AppendUvarint(append(v1, id[:]...), leaf)
		}
		v1 = s.appendStashAndVersions(v1)
		if err := s.log.Checkpoint(t.Context(), v1, s.log.Last()); err != nil {
			t.Fatal(err)
		}
	})
}
