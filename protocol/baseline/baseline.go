// Package baseline implements the two insecure protocols every paper
// measures against, so users can see the gap:
//
//   - plain: each key stored as given under its own address, the value as
//     given. Nothing is hidden.
//   - encrypted: each key stored under PRF(key), the value sealed with
//     AES-GCM bound to that address, together with the key's name (so a
//     dump can name the keys). Contents are hidden; which key is accessed,
//     how often and when is not (the "encryption alone" strawman that the
//     frequency-analysis attack breaks).
//
// Both map one key to one backend address and make one backend round trip
// per operation. The package owns that mapping and an in-memory index of
// stored addresses (for DBSIZE and the capacity limit), rebuilt by a scan
// when a store is reopened. It must never be described as oblivious.
package baseline

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/oblivkv/oblivkv/audit/auditspec"
	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

func init() {
	kv.Register(kv.Protocol{
		Name:    "plain",
		Summary: "insecure baseline: each key and value stored as given; nothing is hidden",
		Open: func(ctx context.Context, env kv.Env) (kv.Store, error) {
			return open(ctx, env, plainCodec{})
		},
		Hides:  kv.HidesNothing,
		Audit:  &auditspec.Spec{Prefixes: []string{plainCodec{}.prefix()}},
		Reseal: func(kv.ResealEnv) (kv.Resealer, error) { return plainResealer{}, nil },
	})
	kv.Register(kv.Protocol{
		Name:    "encrypted",
		Summary: "insecure baseline: keys under a PRF, values sealed; which key is accessed, how often and when is not hidden",
		Open: func(ctx context.Context, env kv.Env) (kv.Store, error) {
			return open(ctx, env, encryptedCodec{keys: env.Keys})
		},
		Hides: kv.HidesContents,
		Audit: &auditspec.Spec{Prefixes: []string{encryptedCodec{}.prefix()}},
		// The addresses stay: PRF(key) of keys older blocks do not name
		// cannot be derived again under a new key (see kv.ResealMeta).
		Reseal: func(env kv.ResealEnv) (kv.Resealer, error) { return encryptedResealer(env), nil },
	})
}

// codec is what distinguishes the two baselines: how a key becomes an
// address and how a key and its value are stored.
type codec interface {
	prefix() string
	addr(key string) string
	encode(addr, key string, val []byte) []byte
	// decode returns the key and the value stored at addr; named is false
	// for a block that does not hold its key's name.
	decode(addr string, stored []byte) (key string, val []byte, named bool, err error)
}

type plainCodec struct{}

func (plainCodec) prefix() string                        { return "p/" }
func (plainCodec) addr(key string) string                { return "p/" + key }
func (plainCodec) encode(_, _ string, val []byte) []byte { return val }
func (plainCodec) decode(addr string, b []byte) (string, []byte, bool, error) {
	return strings.TrimPrefix(addr, "p/"), b, true, nil
}

// encryptedCodec seals the key's name (its length as a uvarint, then its
// bytes) with the value, so that a dump can name the keys the PRF hides;
// namedData separates such blocks from those of older builds, which
// sealed the value alone, bound to the address only.
type encryptedCodec struct{ keys *seal.Keys }

const namedData = "\x00named"

func (encryptedCodec) prefix() string { return "e/" }

func (c encryptedCodec) addr(key string) string {
	id := c.keys.PRF([]byte(key))
	return "e/" + hex.EncodeToString(id[:])
}

func (c encryptedCodec) encode(addr, key string, val []byte) []byte {
	plain := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(key)+len(val)), uint64(len(key)))
	plain = append(append(plain, key...), val...)
	return c.keys.Seal(nil, []byte(addr+namedData), plain)
}

func (c encryptedCodec) decode(addr string, b []byte) (string, []byte, bool, error) {
	plain, err := c.keys.Open(nil, []byte(addr+namedData), b)
	if err != nil { // a block of an older build, or tampered
		val, err := c.keys.Open(nil, []byte(addr), b)
		return "", val, false, err
	}
	n, used := binary.Uvarint(plain)
	if used <= 0 || n > uint64(len(plain)-used) {
		return "", nil, false, fmt.Errorf("%w: malformed block at %s", kv.ErrTampered, addr)
	}
	end := used + int(n)
	return string(plain[used:end]), plain[end:], true, nil
}

// plainResealer keeps the plain baseline's values as they are: nothing of
// them is sealed (kv.Resealer).
type plainResealer struct{}

func (plainResealer) Reseal(addr string, stored []byte) (backend.Item, bool, error) {
	return backend.Item{Addr: addr, Value: stored}, strings.HasPrefix(addr, plainCodec{}.prefix()), nil
}

// encryptedResealer re-seals the encrypted baseline's blocks in place
// (kv.Resealer): a block that names its key bound to its address and
// namedData, one of an older build bound to its address alone.
type encryptedResealer kv.ResealEnv

func (r encryptedResealer) Reseal(addr string, stored []byte) (backend.Item, bool, error) {
	if !strings.HasPrefix(addr, encryptedCodec{}.prefix()) {
		return backend.Item{}, false, nil
	}
	v, err := seal.Reseal(r.From, r.To, nil, []byte(addr+namedData), stored)
	if err != nil {
		v, err = seal.Reseal(r.From, r.To, nil, []byte(addr), stored)
	}
	return backend.Item{Addr: addr, Value: v}, true, err
}

// stripes is the number of locks that keep the index in agreement with
// storage: a Put of a stored key holds its stripe shared (overwrites of a
// hot key run in parallel, ordered by the backend), while a Put of a new
// key and a Delete, which change membership, hold it exclusively.
const stripes = 1024

// loadBatchBytes bounds one backend write of a bulk load.
const loadBatchBytes = 4 << 20

type store struct {
	b        backend.Backend
	codec    codec
	capacity int

	seed  maphash.Seed
	locks [stripes]sync.RWMutex

	mu    sync.RWMutex
	index map[string]struct{} // stored addresses
}

func open(ctx context.Context, env kv.Env, c codec) (*store, error) {
	s := &store{b: env.Backend, codec: c, capacity: env.Capacity,
		seed: maphash.MakeSeed(), index: map[string]struct{}{}}
	if env.Fresh {
		return s, nil
	}
	err := s.b.Scan(ctx, c.prefix(), func(addr string) error {
		s.index[addr] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rebuilding the key index: %w", err)
	}
	return s, nil
}

func (s *store) lock(addr string) *sync.RWMutex {
	return &s.locks[maphash.String(s.seed, addr)%stripes]
}

func (s *store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	addr := s.codec.addr(key)
	vals, err := s.b.Read(ctx, []string{addr})
	if err != nil {
		return nil, false, err
	}
	if vals[0] == nil {
		return nil, false, nil
	}
	_, val, _, err := s.codec.decode(addr, vals[0])
	if err != nil {
		return nil, false, err
	}
	return val, true, nil
}

func (s *store) Put(ctx context.Context, key string, val []byte) error {
	addr := s.codec.addr(key)
	stored := s.codec.encode(addr, key, val)
	l := s.lock(addr)
	l.RLock()
	if s.indexed(addr) {
		defer l.RUnlock()
		return s.b.Write(ctx, []backend.Item{{Addr: addr, Value: stored}})
	}
	l.RUnlock()
	l.Lock()
	defer l.Unlock()
	added, err := s.reserve(addr)
	if err != nil {
		return err
	}
	if err := s.b.Write(ctx, []backend.Item{{Addr: addr, Value: stored}}); err != nil {
		if added {
			s.mu.Lock()
			delete(s.index, addr)
			s.mu.Unlock()
		}
		return err
	}
	return nil
}

func (s *store) indexed(addr string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.index[addr]
	return ok
}

// reserve adds addr to the index unless it is there already, in the same
// critical section as the capacity check, and reports whether it added it.
func (s *store) reserve(addr string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.index[addr]; ok {
		return false, nil
	}
	if len(s.index) >= s.capacity {
		return false, fmt.Errorf("%w: %d keys", kv.ErrFull, s.capacity)
	}
	s.index[addr] = struct{}{}
	return true, nil
}

func (s *store) Delete(ctx context.Context, key string) error {
	addr := s.codec.addr(key)
	l := s.lock(addr)
	l.Lock()
	defer l.Unlock()
	if err := s.b.Delete(ctx, []string{addr}); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.index, addr)
	s.mu.Unlock()
	return nil
}

// Load implements kv.Loader: items are written in batches of about
// loadBatchBytes, one atomic backend write each. An address enters the
// index only once its batch is written.
func (s *store) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.index) > 0 {
		return len(s.index), kv.ErrNotEmpty
	}
	batch := loadBatch{pending: map[string]struct{}{}}
	for key, val := range items {
		addr := s.codec.addr(key)
		_, stored := s.index[addr]
		if !stored && !batch.has(addr) && len(s.index)+len(batch.pending) >= s.capacity {
			err := batch.flush(ctx, s)
			return len(s.index), errors.Join(fmt.Errorf("%w: %d keys", kv.ErrFull, s.capacity), err)
		}
		batch.add(addr, s.codec.encode(addr, key, val))
		if batch.size >= loadBatchBytes {
			if err := batch.flush(ctx, s); err != nil {
				return len(s.index), err
			}
		}
	}
	err := batch.flush(ctx, s)
	return len(s.index), err
}

// loadBatch is one pending write of a bulk load.
type loadBatch struct {
	items   []backend.Item
	pending map[string]struct{} // addresses in items
	size    int
}

func (b *loadBatch) has(addr string) bool {
	_, ok := b.pending[addr]
	return ok
}

func (b *loadBatch) add(addr string, val []byte) {
	b.items = append(b.items, backend.Item{Addr: addr, Value: val})
	b.pending[addr] = struct{}{}
	b.size += len(addr) + len(val)
}

// flush writes the batch and moves its addresses into the index; s.mu is
// held by the caller.
func (b *loadBatch) flush(ctx context.Context, s *store) error {
	if len(b.items) == 0 {
		return nil
	}
	if err := s.b.Write(ctx, b.items); err != nil {
		return err
	}
	for a := range b.pending {
		s.index[a] = struct{}{}
	}
	b.items, b.size = b.items[:0], 0
	clear(b.pending)
	return nil
}

func (s *store) Stats() kv.Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return kv.Stats{Keys: int64(len(s.index))}
}

func (s *store) Close() error { return s.b.Close() }

// StoredKeys implements kv.KeyLister: the index holds addresses, so it
// reads every stored block, in batches of listBatch, for its key's name
// (a baseline hides nothing of its accesses). A block written by a build
// that did not seal the name with the value is an error.
func (s *store) StoredKeys(ctx context.Context) ([]string, error) {
	s.mu.RLock()
	addrs := slices.Collect(maps.Keys(s.index))
	s.mu.RUnlock()
	keys := make([]string, 0, len(addrs))
	for batch := range slices.Chunk(addrs, listBatch) {
		vals, err := s.b.Read(ctx, batch)
		if err != nil {
			return nil, err
		}
		for i, stored := range vals {
			if stored == nil { // deleted since the index was copied
				continue
			}
			key, _, named, err := s.codec.decode(batch[i], stored)
			switch {
			case err != nil:
				return nil, err
			case !named:
				return nil, errUnnamed
			}
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// listBatch is the number of addresses one Read of StoredKeys asks for.
const listBatch = 1024

var errUnnamed = errors.New("the store holds a value written by an older build, which did not seal its key's name with it, so its keys cannot be named; write each key again to seal its name")
