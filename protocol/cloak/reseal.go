package cloak

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// ResealState implements kv.ResealStater: the batch id that last wrote
// each physical address, which its element is sealed bound to.
func (s *store) ResealState() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retry != nil || s.broken != nil {
		return nil, errors.New("cloak: storage is behind the store's state; start it and stop it cleanly first")
	}
	ids := make([]uint64, len(s.slots))
	for a, sl := range s.slots {
		ids[a] = sl.lastBatch
	}
	return kv.EncodeNumbers(ids), nil
}

// resealer re-seals the elements (kv.Resealer), each bound to its address
// and the batch id of the store's state (ResealState).
type resealer struct {
	env kv.ResealEnv
	ids []uint64
}

func newResealer(env kv.ResealEnv) (kv.Resealer, error) {
	ids, err := kv.DecodeNumbers(env.State)
	return resealer{env: env, ids: ids}, err
}

func (r resealer) Reseal(addr string, stored []byte) (backend.Item, bool, error) {
	index, ok := strings.CutPrefix(addr, AddrPrefix)
	if !ok {
		return backend.Item{}, false, nil
	}
	if len(index) != 4 || uint64(binary.BigEndian.Uint32([]byte(index))) >= uint64(len(r.ids)) {
		return backend.Item{}, true, fmt.Errorf("%w: %q is no physical address of the store", kv.ErrTampered, addr)
	}
	id := r.ids[binary.BigEndian.Uint32([]byte(index))]
	sealed, err := seal.Reseal(r.env.From, r.env.To, nil, binary.BigEndian.AppendUint64([]byte(addr), id), stored)
	return backend.Item{Addr: addr, Value: sealed}, true, err
}
