package ringoram

import (
	"encoding/binary"
	"fmt"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// Resealer re-seals the items of Ring ORAM trees under a new key for
// `oblivkv rekey`, from storage alone: a bucket's metadata is bound to its
// address, and its slots to the slot version the metadata holds. Every
// metadata address of a Layout sorts before its slots' (tag 'm' before
// 's'), so a Resealer handed a tree's addresses in ascending order has
// read a bucket's metadata before its slots. Not safe for concurrent use.
type Resealer struct {
	from, to     *seal.Keys
	slotVersions map[string]uint64 // bucketAddr: the SlotVersion of its metadata
}

// NewResealer returns a Resealer from the keys from to the keys to.
func NewResealer(from, to *seal.Keys) *Resealer {
	return &Resealer{from: from, to: to, slotVersions: map[string]uint64{}}
}

// Reseal returns the item stored at addr, an address of l, sealed under
// the new key (see seal.Reseal), and false for an address that is none of
// l's.
func (r *Resealer) Reseal(l Layout, addr string, stored []byte) (backend.Item, bool, error) {
	if bucket, ok := l.ParseMeta(addr); ok {
		plain, err := seal.OpenEither(r.from, r.to, []byte(addr), stored)
		if err != nil || len(plain) < metaHeader {
			return backend.Item{}, true, fmt.Errorf("metadata of bucket %d at %q: %w", bucket, addr, seal.ErrTampered)
		}
		r.slotVersions[l.bucketAddr(bucket)] = binary.BigEndian.Uint64(plain[8:])
		return backend.Item{Addr: addr, Value: r.to.Seal(nil, []byte(addr), plain)}, true, nil
	}
	bucket, slot, ok := l.ParseSlot(addr)
	if !ok {
		return backend.Item{}, false, nil
	}
	version, ok := r.slotVersions[l.bucketAddr(bucket)]
	if !ok {
		return backend.Item{}, true, fmt.Errorf("%w: slot %d of bucket %d has no metadata on storage", seal.ErrTampered, slot, bucket)
	}
	sealed, err := tree.ResealSlot(r.from, r.to, nil, l.bucketAddr(bucket), version, slot, stored)
	return backend.Item{Addr: addr, Value: sealed}, true, err
}
