package cloak

import (
	"context"

	"github.com/oblivkv/oblivkv/kv"
)

// OpenRaw opens the protocol's store itself, without package kv's checks,
// so a test can look inside it with Where.
func OpenRaw(ctx context.Context, env kv.Env) (kv.Store, error) { return open(ctx, env) }

// Where returns the storage address of key in a store OpenRaw opened, or
// "" if it has none: the ground truth a frequency attack is scored on.
func Where(st kv.Store, key string) string {
	s := st.(*store)
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.where[key]; ok {
		return addr(a)
	}
	return ""
}

// RunBatch runs one batch now, as the loop does every Delta.
func RunBatch(st kv.Store) { st.(*store).runBatch(context.Background()) }
