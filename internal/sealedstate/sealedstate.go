// Package sealedstate keeps a proxy's trusted state on the untrusted
// backend between a clean shutdown and the next start: one gob-encoded
// value, sealed and bound to its address. A proxy Loads it, checks it fits
// its configuration, and Deletes it before serving, so a proxy that
// crashes afterwards finds nothing at its next start and refuses to serve
// stale data instead of silently losing writes. A state that does not fit
// is left in place, so a restart with the right configuration still works.
//
// It owns only the encoding of that one record; what the state holds is
// the protocol's. It must never store anything unsealed.
package sealedstate

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/seal"
)

// Save writes v, gob-encoded and sealed under addr, in one backend write.
func Save(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string, v any) error {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		return fmt.Errorf("encoding the state at %q: %w", addr, err)
	}
	sealed := keys.Seal(nil, []byte(addr), buf.Bytes())
	return b.Write(ctx, []backend.Item{{Addr: addr, Value: sealed}})
}

// Load reads the state saved at addr into v. It reports false, and leaves
// v alone, when there is none; a record that fails to open is an error
// wrapping seal.ErrTampered.
func Load(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string, v any) (bool, error) {
	vals, err := b.Read(ctx, []string{addr})
	if err != nil {
		return false, err
	}
	if vals[0] == nil {
		return false, nil
	}
	plain, err := keys.Open(nil, []byte(addr), vals[0])
	if err != nil {
		return false, err
	}
	if err := gob.NewDecoder(bytes.NewReader(plain)).Decode(v); err != nil {
		return false, fmt.Errorf("%w: decoding the state at %q: %v", seal.ErrTampered, addr, err)
	}
	return true, nil
}

// ErrUnclean reports a store whose saved state is missing: it was not
// shut down cleanly after its last start, and what the proxy held in
// memory is lost.
var ErrUnclean = errors.New("the store was not shut down cleanly: its proxy state is lost")

// Require is Load for a store that must have a saved state: a missing one
// is ErrUnclean.
func Require(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string, v any) error {
	found, err := Load(ctx, b, keys, addr, v)
	if err == nil && !found {
		err = ErrUnclean
	}
	return err
}

// Delete removes the state saved at addr: from now on, only a clean
// shutdown saves it again.
func Delete(ctx context.Context, b backend.Backend, addr string) error {
	return b.Delete(ctx, []string{addr})
}
