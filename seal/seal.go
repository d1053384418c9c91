// Package seal owns the project's cryptography: AES-256-GCM sealing of every
// block stored on untrusted storage, bound by associated data to the address
// (and version, where a protocol has one) it is stored under; a PRF for
// derived storage identifiers; the MAC of backup archives; and the master
// key file.
//
// Sealing binds a block to its address, so a storage operator that flips a
// bit, copies a block to another address or serves a block sealed under
// another key makes Open fail with ErrTampered; it never yields wrong data.
//
// This package must never log, print or return key material in errors.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sync"
)

// MasterKeySize is the size in bytes of a master key.
const MasterKeySize = 32

// PRFSize is the size in bytes of a PRF output.
const PRFSize = 16

const nonceSize = 12

// ErrTampered reports a sealed block that does not authenticate: it was
// modified, moved to another address, replayed under another version, or
// sealed with another key.
var ErrTampered = errors.New("seal: block failed authentication (tampered storage or wrong key)")

// Keys holds the subkeys derived from one master key. It is safe for
// concurrent use.
//
// Keys have two PRFs. PRF is for identifiers derived from logical keys
// that no store keeps (tree block IDs, the encrypted baseline's
// addresses): a store keeps its first key's across rekeys (WithPRFKey).
// CurrentPRF is the master key's own, for identifiers a rekey derives
// again (Waffle's addresses, whose keys its trusted state holds). Until a
// store's first rekey they are the same.
type Keys struct {
	aead       cipher.AEAD
	kept       *prf
	current    *prf
	archiveKey []byte // the MAC subkey of backup archives
}

// prf is HMAC-SHA256 under one key.
type prf struct {
	key  []byte
	pool sync.Pool // of hash.Hash
}

func newPRF(key []byte) *prf {
	p := &prf{key: key}
	p.pool.New = func() any { return hmac.New(sha256.New, key) }
	return p
}

// NewKeys derives the sealing and PRF subkeys from a master key of
// MasterKeySize bytes.
func NewKeys(master []byte) (*Keys, error) {
	if len(master) != MasterKeySize {
		return nil, fmt.Errorf("seal: master key must be %d bytes, got %d", MasterKeySize, len(master))
	}
	block, err := aes.NewCipher(derive(master, "oblivkv seal v1"))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	p := newPRF(derive(master, "oblivkv prf v1"))
	return &Keys{aead: aead, kept: p, current: p, archiveKey: derive(master, "oblivkv archive mac v1")}, nil
}

// PRFKey returns the key of PRF, for a store that re-keys its sealing and
// must keep computing the identifiers it derived under the old key (see
// WithPRFKey). The caller must keep it sealed.
func (k *Keys) PRFKey() []byte { return slices.Clone(k.kept.key) }

// WithPRFKey returns keys that seal and compute CurrentPRF as k does, and
// compute PRF under prfKey (a PRFKey of other keys).
func (k *Keys) WithPRFKey(prfKey []byte) (*Keys, error) {
	if len(prfKey) != sha256.Size {
		return nil, fmt.Errorf("seal: PRF key must be %d bytes, got %d", sha256.Size, len(prfKey))
	}
	return &Keys{aead: k.aead, kept: newPRF(slices.Clone(prfKey)), current: k.current, archiveKey: k.archiveKey}, nil
}

// ArchiveMAC returns the MAC of a backup archive whose SHA-256 digest is
// digest: HMAC-SHA256 under a subkey of its own, derived from the master
// key, so that only a holder of the key can make an archive that restores.
func (k *Keys) ArchiveMAC(digest []byte) []byte {
	mac := hmac.New(sha256.New, k.archiveKey)
	mac.Write(digest)
	return mac.Sum(nil)
}

// GenerateMaster returns a fresh random master key.
func GenerateMaster() ([]byte, error) {
	m := make([]byte, MasterKeySize)
	if _, err := rand.Read(m); err != nil {
		return nil, fmt.Errorf("seal: generating master key: %w", err)
	}
	return m, nil
}

func derive(master []byte, label string) []byte {
	mac := hmac.New(sha256.New, master)
	mac.Write([]byte(label))
	return mac.Sum(nil)
}

// Overhead is the number of bytes Seal adds to a plaintext.
func (k *Keys) Overhead() int { return nonceSize + k.aead.Overhead() }

// Seal appends to dst the sealed form of plaintext, authenticated together
// with ad (the block's address, and version where there is one).
func (k *Keys) Seal(dst, ad, plaintext []byte) []byte {
	start := len(dst)
	dst = slices.Grow(dst, k.Overhead()+len(plaintext))[:start+nonceSize] // one allocation at most
	if _, err := rand.Read(dst[start:]); err != nil {
		panic("seal: random source failed: " + err.Error())
	}
	return k.aead.Seal(dst, dst[start:start+nonceSize], plaintext, ad)
}

// Open appends to dst the plaintext of a block sealed with the same ad, or
// returns ErrTampered.
func (k *Keys) Open(dst, ad, sealed []byte) ([]byte, error) {
	if len(sealed) < k.Overhead() {
		return nil, ErrTampered
	}
	out, err := k.aead.Open(dst, sealed[:nonceSize], sealed[nonceSize:], ad)
	if err != nil {
		return nil, ErrTampered
	}
	return out, nil
}

// Reseal appends to dst sealed, bound to ad, sealed afresh under to: it
// opens under from (the item is not re-sealed yet) or else under to (it
// was, and a new nonce changes nothing it means). Anything that opens
// under neither is ErrTampered.
func Reseal(from, to *Keys, dst, ad, sealed []byte) ([]byte, error) {
	plain, err := OpenEither(from, to, ad, sealed)
	if err != nil {
		return nil, err
	}
	return to.Seal(dst, ad, plain), nil
}

// OpenEither returns the plaintext of sealed, which opens under from or
// under to, or ErrTampered.
func OpenEither(from, to *Keys, ad, sealed []byte) ([]byte, error) {
	plain, err := from.Open(nil, ad, sealed)
	if err != nil {
		plain, err = to.Open(nil, ad, sealed)
	}
	return plain, err
}

// PRF returns HMAC-SHA256 of the parts, each length-prefixed so that
// different splits of the same bytes never collide, truncated to PRFSize,
// under the PRF key a store keeps across rekeys.
func (k *Keys) PRF(parts ...[]byte) [PRFSize]byte { return k.kept.sum(parts) }

// CurrentPRF is PRF under the master key's own PRF key, which changes
// at every rekey.
func (k *Keys) CurrentPRF(parts ...[]byte) [PRFSize]byte { return k.current.sum(parts) }

func (p *prf) sum(parts [][]byte) [PRFSize]byte {
	h := p.pool.Get().(hash.Hash)
	h.Reset()
	var lenBuf [binary.MaxVarintLen64]byte
	for _, p := range parts {
		h.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(p)))])
		h.Write(p)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	p.pool.Put(h)
	var out [PRFSize]byte
	copy(out[:], sum[:])
	return out
}
