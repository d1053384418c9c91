// Package sealedstate keeps a proxy's trusted state on the untrusted
// backend between a clean shutdown and the next start. A proxy loads it,
// checks it fits its configuration, and deletes it before serving, so a
// proxy that crashes afterwards finds nothing at its next start and
// refuses to serve stale data instead of silently losing writes. A state
// that does not fit is left in place, so a restart with the right
// configuration still works.
//
// A record at addr is its bytes in chunks at addr+"/0", addr+"/1"...,
// each sealed bound to its address and written in backend writes of about
// the chunk size, then a header at addr, sealed, holding the number of
// chunks and the SHA-256 of the whole: written last, it is the commit
// point, and chunks of different saves cannot be mixed. Chunking keeps
// every value under a backend's size limit (Redis refuses values over
// 512 MB) however large the state grows.
//
// It owns only how that record is stored (and, for Save and Require, a
// gob encoding); what the state holds is the protocol's. It must never
// store anything unsealed.
package sealedstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"strconv"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/seal"
)

// DefaultChunkBytes is the size of one chunk, and of one backend write of
// a save, unless a caller asks for another.
const DefaultChunkBytes = 4 << 20

// maxChunks bounds the chunk count a header may claim.
const maxChunks = 1 << 24

// ErrUnclean reports a store whose saved state is missing: it was not
// shut down cleanly after its last start, and what the proxy held in
// memory is lost.
var ErrUnclean = errors.New("the store was not shut down cleanly: its proxy state is lost")

func chunkAddr(addr string, i int) string { return addr + "/" + strconv.Itoa(i) }

// SaveBytes saves plain as the record at addr, in chunks of chunk bytes
// (DefaultChunkBytes when chunk <= 0).
func SaveBytes(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string, plain []byte, chunk int) error {
	if chunk <= 0 {
		chunk = DefaultChunkBytes
	}
	n := max(1, (len(plain)+chunk-1)/chunk)
	var items []backend.Item
	size := 0
	for i := range n {
		a := chunkAddr(addr, i)
		items = append(items, backend.Item{Addr: a, Value: keys.Seal(nil, []byte(a), plain[i*chunk:min(len(plain), (i+1)*chunk)])})
		if size += len(items[len(items)-1].Value); size >= chunk || i == n-1 {
			if err := b.Write(ctx, items); err != nil {
				return err
			}
			items, size = items[:0], 0
		}
	}
	sum := sha256.Sum256(plain)
	hdr := append(binary.AppendUvarint(nil, uint64(n)), sum[:]...)
	return b.Write(ctx, []backend.Item{{Addr: addr, Value: keys.Seal(nil, []byte(addr), hdr)}})
}

// LoadBytes returns the record saved at addr: ErrUnclean when there is
// none, an error wrapping seal.ErrTampered when a chunk is missing, fails
// to open or belongs to another save.
func LoadBytes(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string) ([]byte, error) {
	n, sum, err := readHeader(ctx, b, keys, addr)
	if err != nil {
		return nil, err
	}
	vals, err := b.Read(ctx, chunkAddrs(addr, n))
	if err != nil {
		return nil, err
	}
	var plain []byte
	for i, v := range vals {
		if v == nil {
			return nil, fmt.Errorf("%w: chunk %d of the state at %q is missing", seal.ErrTampered, i, addr)
		}
		if plain, err = keys.Open(plain, []byte(chunkAddr(addr, i)), v); err != nil {
			return nil, fmt.Errorf("chunk %d of the state at %q: %w", i, addr, err)
		}
	}
	if sha256.Sum256(plain) != sum {
		return nil, fmt.Errorf("%w: the chunks of the state at %q do not belong together", seal.ErrTampered, addr)
	}
	return plain, nil
}

// readHeader returns the chunk count and checksum of the record at addr.
func readHeader(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string) (int, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	vals, err := b.Read(ctx, []string{addr})
	if err != nil {
		return 0, sum, err
	}
	if vals[0] == nil {
		return 0, sum, ErrUnclean
	}
	hdr, err := keys.Open(nil, []byte(addr), vals[0])
	if err != nil {
		return 0, sum, fmt.Errorf("the state header at %q: %w", addr, err)
	}
	n, k := binary.Uvarint(hdr)
	if k <= 0 || len(hdr) != k+sha256.Size || n < 1 || n > maxChunks {
		return 0, sum, fmt.Errorf("%w: the state header at %q is malformed", seal.ErrTampered, addr)
	}
	copy(sum[:], hdr[k:])
	return int(n), sum, nil
}

func chunkAddrs(addr string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = chunkAddr(addr, i)
	}
	return out
}

// Save saves v, gob-encoded, as the record at addr.
func Save(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string, v any) error {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		return fmt.Errorf("encoding the state at %q: %w", addr, err)
	}
	return SaveBytes(ctx, b, keys, addr, buf.Bytes(), 0)
}

// Require reads the record saved at addr into v: ErrUnclean when there is
// none; a record that fails to open or to decode wraps seal.ErrTampered.
func Require(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string, v any) error {
	plain, err := LoadBytes(ctx, b, keys, addr)
	if err != nil {
		return err
	}
	if err := gob.NewDecoder(bytes.NewReader(plain)).Decode(v); err != nil {
		return fmt.Errorf("%w: decoding the state at %q: %v", seal.ErrTampered, addr, err)
	}
	return nil
}

// Delete removes the record saved at addr, header and chunks, in one
// backend call: from now on, only a clean shutdown saves it again.
// Deleting a record that is not there does nothing.
func Delete(ctx context.Context, b backend.Backend, keys *seal.Keys, addr string) error {
	n, _, err := readHeader(ctx, b, keys, addr)
	if errors.Is(err, ErrUnclean) {
		return nil
	}
	if err != nil {
		return err
	}
	return b.Delete(ctx, append(chunkAddrs(addr, n), addr))
}
