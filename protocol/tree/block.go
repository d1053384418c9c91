package tree

import "github.com/oblivkv/oblivkv/seal"

// BlockID identifies a block: a PRF of its logical key (IDOf). The key
// itself is never stored in a block; the proxy maps keys to IDs.
type BlockID [seal.PRFSize]byte

// Block is one real block: its identifier and its value (at most the
// Codec's value size; padding is added and removed by the Codec).
type Block struct {
	ID    BlockID
	Value []byte
}

// idDomain separates block identifiers from every other use of the PRF.
var idDomain = []byte("oblivkv tree block id v1")

// IDOf returns the block identifier of a logical key.
func IDOf(keys *seal.Keys, key string) BlockID {
	return keys.PRF(idDomain, []byte(key))
}
