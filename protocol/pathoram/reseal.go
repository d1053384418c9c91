package pathoram

import (
	"errors"
	"fmt"
	"strings"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// ResealState implements kv.ResealStater: every bucket's version, which
// the proxy keeps and each bucket's slots are sealed bound to.
func (s *store) ResealState() ([]byte, error) {
	s.turns.exclusive()
	defer s.turns.done()
	if s.remote.behind() || s.remote.broken != nil {
		return nil, errors.New("pathoram: storage is behind the store's state; start it and stop it cleanly first")
	}
	return kv.EncodeNumbers(s.remote.versions), nil
}

// resealer re-seals the buckets of the tree (kv.Resealer), each bound to
// its version in the store's state (ResealState).
type resealer struct {
	env      kv.ResealEnv
	layout   tree.Layout
	versions []uint64
}

func newResealer(env kv.ResealEnv) (kv.Resealer, error) {
	versions, err := kv.DecodeNumbers(env.State)
	if err != nil {
		return nil, err
	}
	return resealer{env: env, layout: tree.Layout{Prefix: treePrefix}, versions: versions}, nil
}

func (r resealer) Reseal(addr string, stored []byte) (backend.Item, bool, error) {
	if !strings.HasPrefix(addr, treePrefix) {
		return backend.Item{}, false, nil
	}
	bucket, ok := r.layout.Bucket(addr)
	if !ok || bucket >= uint64(len(r.versions)) {
		return backend.Item{}, true, fmt.Errorf("%w: %q is no bucket of the tree", kv.ErrTampered, addr)
	}
	sealed, err := tree.ResealBucket(r.env.From, r.env.To, addr, r.versions[bucket], tree.SlotSize(r.env.To, r.env.ValueSize), stored)
	return backend.Item{Addr: addr, Value: sealed}, true, err
}
