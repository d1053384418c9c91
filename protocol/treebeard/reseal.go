package treebeard

import (
	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// resealer re-seals the buckets of every tree (kv.Resealer) with one
// ringoram.Resealer: the trees' prefixes keep each tree's addresses
// together, its metadata before its slots.
type resealer struct{ trees *ringoram.Resealer }

func newResealer(env kv.ResealEnv) (kv.Resealer, error) {
	return resealer{ringoram.NewResealer(env.From, env.To)}, nil
}

func (r resealer) Reseal(addr string, stored []byte) (backend.Item, bool, error) {
	l, ok := treeLayout(addr)
	if !ok {
		return backend.Item{}, false, nil
	}
	return r.trees.Reseal(l, addr, stored)
}
