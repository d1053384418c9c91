package kv

import (
	"encoding/binary"
	"fmt"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable/delta"
	"github.com/oblivkv/oblivkv/seal"
)

// Resealer re-seals a protocol's items on storage under a new master key
// (oblivkv rekey, package cmd/oblivkv/internal/rekey), item by item, from
// what storage holds and, for a protocol whose store is a ResealStater,
// the part of its trusted state its associated data names: never a
// logical key. Storage hands it every address once, in ascending byte
// order, so a protocol whose associated data names something stored at a
// lower address (a Ring ORAM bucket's slot version, in the bucket's
// metadata) may remember it.
type Resealer interface {
	// Reseal returns the item to store in place of stored at addr: the
	// same item sealed under ResealEnv.To, at addr or, for a protocol
	// whose addresses are PRFs under the current key (CurrentPRF), at its
	// address under To (addr is then deleted). An item a rekey cut short
	// already re-sealed (it opens under To) is sealed afresh; one that
	// opens under neither key is an error wrapping ErrTampered. ok is
	// false when addr is none of the protocol's addresses.
	Reseal(addr string, stored []byte) (item backend.Item, ok bool, err error)
}

// ResealEnv is what a protocol's Reseal function receives.
type ResealEnv struct {
	From, To  *seal.Keys // the old key's and the new key's
	ValueSize int        // the store's, as its metadata records it
	// State is what the store's ResealState returned; nil for a store
	// that is no ResealStater.
	State []byte
}

// ResealStater is implemented by a store whose items are bound to its
// trusted state (bucket versions, batch ids, level nonces), which its
// Resealer then needs.
type ResealStater interface {
	// ResealState encodes what the protocol's Resealer needs of the
	// store's trusted state, as its Close left it: rekey calls it after
	// Close, whose checkpoint the state then describes. It fails for a
	// store that closed with storage behind its state.
	ResealState() ([]byte, error)
}

// AsResealStater returns the ResealStater of a store Open returned, if its
// protocol's store is one.
func AsResealStater(s Store) (ResealStater, bool) {
	if c, ok := s.(*checked); ok {
		s = c.inner
	}
	r, ok := s.(ResealStater)
	return r, ok
}

// EncodeNumbers encodes one number per item (a bucket's version, an
// address's batch id) as a ResealState: a count, then the numbers, as
// uvarints.
func EncodeNumbers(nums []uint64) []byte {
	b := binary.AppendUvarint(make([]byte, 0, 2+2*len(nums)), uint64(len(nums)))
	for _, n := range nums {
		b = binary.AppendUvarint(b, n)
	}
	return b
}

// DecodeNumbers decodes what EncodeNumbers encoded.
func DecodeNumbers(b []byte) ([]uint64, error) {
	d := delta.NewDecoder(b)
	nums := make([]uint64, d.Count())
	for i := range nums {
		nums[i] = d.Uvarint()
	}
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("kv: reseal state: %w", err)
	}
	return nums, nil
}
