package kv

import (
	"strings"

	"github.com/oblivkv/oblivkv/seal"
)

// Resealer re-seals a protocol's items on storage under a new master key
// (oblivkv rekey, package internal/rekey), item by item, from what storage
// holds alone: no trusted state, no logical key. Storage hands it every
// address once, in ascending byte order, so a protocol whose associated
// data names something stored at a lower address (a Ring ORAM bucket's
// slot version, in the bucket's metadata) may remember it.
type Resealer interface {
	// Reseal returns the value to store at addr in place of stored: the
	// same item sealed under ResealEnv.To. An item a rekey cut short
	// already re-sealed (it opens under To) is sealed afresh; one that
	// opens under neither key is an error wrapping ErrTampered. ok is
	// false when addr is none of the protocol's addresses.
	Reseal(addr string, stored []byte) (value []byte, ok bool, err error)
}

// ResealEnv is what a protocol's Reseal function receives.
type ResealEnv struct {
	From, To  *seal.Keys // the old key's and the new key's
	ValueSize int        // the store's, as its metadata records it
}

// AddrResealer re-seals the items under Prefix sealed bound to their
// address alone, the way most of storage is sealed.
type AddrResealer struct {
	Prefix   string
	From, To *seal.Keys
}

// Reseal implements Resealer.
func (r AddrResealer) Reseal(addr string, stored []byte) ([]byte, bool, error) {
	if !strings.HasPrefix(addr, r.Prefix) {
		return nil, false, nil
	}
	v, err := seal.Reseal(r.From, r.To, nil, []byte(addr), stored)
	return v, true, err
}
