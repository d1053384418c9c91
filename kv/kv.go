// Package kv is the public Go API of oblivkv: the Store contract every
// protocol implements, its errors and statistics, and Open, which builds a
// Store of a named protocol over a backend.
//
// Each protocol registers one descriptor (Protocol: its name, a summary,
// its Open function and its Options, whose fields document their defaults)
// with Register from its own package; import
// github.com/oblivkv/oblivkv/protocol/all to make every protocol available
// to Open, as database/sql drivers are made available. The registry is the
// one list of protocols: Lookup and Protocols read it.
//
// Every store Open returns also applies mutations (Updater: increments,
// appends, conditional sets, Redis's string commands) and MSETNX
// (MultiSetter). A protocol that implements Updater runs a mutation inside
// one access; for the others kv runs it as a Get and then a Put or a
// Delete, whatever its outcome, under a per-key lock.
//
// kv owns the checks common to every protocol (key and value sizes, a closed
// store, operation counters) and the sealed metadata record that binds a
// backend's contents to one protocol, one parameter set and one key. It must
// never touch a protocol's storage layout.
package kv

import (
	"context"
	"errors"
	"iter"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/seal"
)

// Store is an oblivious (or, for the baselines, plain) key-value store.
//
// A Store is safe for concurrent use and linearizable per key: every Get
// observes the latest acknowledged Put or Delete of its key.
//
// Obliviousness contract: in every oblivious protocol, a Get of a missing
// key, a Put of a new key, a Put of an existing key and a Delete cost the
// same adversary-visible work (the same number, kind, size and timing of
// backend calls) as any other access; so does a mutation (Updater), whether
// it applies or not, in every protocol that implements Updater itself.
// Existence never leaks through timing, errors or backend calls. The
// insecure baselines (plain, encrypted) make no
// such promise.
type Store interface {
	// Get returns the value of key and whether it exists.
	Get(ctx context.Context, key string) (val []byte, ok bool, err error)
	// Put sets key to val. A value longer than the store's value size is
	// rejected with ErrValueTooLarge; a new key in a full store with ErrFull.
	Put(ctx context.Context, key string, val []byte) error
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Stats returns a snapshot of the store's counters.
	Stats() Stats
	// Close flushes everything to the backend and releases it. Every method
	// returns ErrClosed afterwards.
	Close() error
}

// Loader is the bulk-initialisation path: each protocol builds its initial
// layout in memory and writes it to the backend in large batches, as every
// paper initialises its store, never as one oblivious access per item.
type Loader interface {
	// Load fills an empty store with items (later duplicates of a key win)
	// and returns how many distinct keys it holds afterwards. A store that
	// already holds keys returns ErrNotEmpty.
	Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error)
}

// KeyLister names the keys a store holds, from its trusted state (a
// position map, a key map, an index): what `oblivkv dump` reads every
// value of. A protocol that keeps only a PRF of each key cannot name them
// and does not implement it.
type KeyLister interface {
	// StoredKeys returns a new slice of the keys the store holds now, in
	// no particular order. It is safe while the store serves requests; a
	// key written meanwhile may or may not be named. It makes no backend
	// call in an oblivious protocol.
	StoredKeys(ctx context.Context) ([]string, error)
}

// Errors returned by every Store. Test with errors.Is.
var (
	ErrValueTooLarge = errors.New("value larger than the store's value size")
	ErrKeyTooLarge   = errors.New("key larger than the store's maximum key size")
	ErrFull          = errors.New("store is full")
	ErrTampered      = seal.ErrTampered
	ErrClosed        = errors.New("store is closed")
	ErrNotEmpty      = errors.New("bulk load needs an empty store")
	// ErrWrongKey reports that the backend holds a store sealed under
	// another key (or that its metadata was tampered with).
	ErrWrongKey = errors.New("the key does not open this store's data (wrong key file, or tampered storage)")
	// ErrMismatch reports an Open whose protocol or parameters differ from
	// those the stored data was created with.
	ErrMismatch = errors.New("stored data was created with another configuration")
	// ErrUnknownProtocol reports a protocol name nobody registered.
	ErrUnknownProtocol = errors.New("unknown protocol")
	// ErrRollback reports storage older than the proxy's trusted state:
	// restored from an older copy, or it lost acknowledged writes. Such a
	// store is refused at open, never served.
	ErrRollback = durable.ErrRollback
	// ErrFenced reports a store that stopped because storage refused one
	// of its writes: a later open of the same store (or a newer leader of
	// its group) has written since, with a newer fencing token
	// (backend.Fence). The refused write changed nothing; this process
	// serves nothing more and must be restarted, if at all, from the
	// journal the newer one left.
	ErrFenced = backend.ErrFenced
	// ErrUnavailable reports a request that storage, a journal or a
	// layer of a cluster did not complete (a cluster's Stash or ORAM
	// shard gave it up): a read may be sent again; a write's outcome is
	// unknown, so read the key before writing it again.
	ErrUnavailable = errors.New("unavailable: the request did not complete; a write's outcome is unknown")
	// ErrKeysUnnamed reports a KeyLister whose trusted state holds keys
	// an earlier build stored without their names: it names none rather
	// than some.
	ErrKeysUnnamed = errors.New("the store holds keys written by an earlier build, which kept no record of their names, so its keys cannot be listed; write each key again to record its name")
)

// Stats is a snapshot of a store's counters.
type Stats struct {
	Protocol string
	// Logical operations served.
	Gets, Puts, Deletes uint64
	// Keys currently stored, as the trusted side knows it.
	Keys int64
	// The store's parameters.
	Capacity, ValueSize, MaxKeySize int
	// Backend counters: round trips, addresses and bytes moved.
	Backend observe.Counters
	// Extra holds protocol-specific counters (stash size, cache size...),
	// in a fixed order per protocol.
	Extra []Stat
}

// Ops is the number of logical operations served.
func (s Stats) Ops() uint64 { return s.Gets + s.Puts + s.Deletes }

// Stat is one named protocol-specific counter.
type Stat struct {
	Name  string
	Value float64
}
