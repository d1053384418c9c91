package taostore

import (
	"fmt"
	"strings"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// resealer re-seals TaoStore's buckets (kv.Resealer): each is stored
// behind its version (backend.WriteVersioned), which its slots' seal binds,
// so storage alone tells how to open it.
type resealer kv.ResealEnv

func newResealer(env kv.ResealEnv) (kv.Resealer, error) { return resealer(env), nil }

func (r resealer) Reseal(addr string, stored []byte) (backend.Item, bool, error) {
	if !strings.HasPrefix(addr, BucketPrefix) {
		return backend.Item{}, false, nil
	}
	version, data, err := backend.SplitVersioned(stored)
	if err != nil {
		return backend.Item{}, true, fmt.Errorf("%w: %w", kv.ErrTampered, err)
	}
	sealed, err := tree.ResealBucket(r.From, r.To, addr, version, tree.SlotSize(r.To, r.ValueSize), data)
	if err != nil {
		return backend.Item{}, true, err
	}
	return backend.Item{Addr: addr, Value: backend.EncodeVersioned(version, sealed)}, true, nil
}
