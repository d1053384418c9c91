// Package backend defines the untrusted storage interface every protocol
// talks to, the small wrappers that apply to any backend, and Retry, how
// a protocol runs again a call storage failed.
//
// Everything below this interface belongs to the adversary: the sequence of
// calls made on a Backend (which addresses, which operation, how many bytes,
// when, grouped how) is exactly what a storage operator observes. A Backend
// never sees plaintext or logical keys; addresses are opaque byte strings
// chosen by the protocol, and values are whatever the protocol hands it
// (sealed blocks for every protocol except the insecure "plain" baseline).
//
// A fenced write (WriteFenced, PipelineFenced) carries a Fence: a key
// where storage keeps the highest token it accepted for one machine, and
// the writer's token. Storage refuses, atomically for the whole batch, a
// write whose token is lower than the one it holds (ErrFenced), so a
// driver a newer one has replaced can never overwrite its successor's
// state, and learns it must stop.
//
// The implementations live in sub-packages: mem (in memory, for tests),
// disk (embedded pebble, the default) and redis (go-redis v9).
//
// This package must never log or inspect values, and never reorder or split
// a batch: one call is one round trip and one atomic unit.
package backend

import (
	"context"
	"errors"
)

// Item is one address/value pair of a batched write.
type Item struct {
	Addr  string
	Value []byte
}

// Backend is batched, untrusted key-value storage.
//
// Every method is one round trip to the storage. Implementations must be
// safe for concurrent use and linearizable per call: a Write is applied
// atomically as a whole (all items or none), and a Read observes either all
// or none of any concurrent Write.
type Backend interface {
	// Read returns the values stored at addrs, in order. A missing address
	// yields a nil entry, not an error. The returned slices belong to the
	// caller.
	Read(ctx context.Context, addrs []string) ([][]byte, error)
	// Write stores all items atomically. Later items win over earlier items
	// with the same address.
	Write(ctx context.Context, items []Item) error
	// WriteVersioned stores each item whose Version is newer than the
	// version stored at its address (a missing address has version 0), as
	// one atomic step, and skips the others: a late write-back can then
	// never overwrite a newer one (TaoStore, Sec. IV-B step 3). The stored
	// value is the version followed by the value (see SplitVersioned). It
	// returns how many items were stale.
	WriteVersioned(ctx context.Context, items []VersionedItem) (stale int, err error)
	// WriteFenced stores items and f.Token at f.Key as one atomic step if
	// f.Token is at least the token stored at f.Key (a missing one is 0;
	// an equal token is a retried write), and otherwise stores nothing and
	// returns an error wrapping ErrFenced. The zero Fence makes it Write.
	WriteFenced(ctx context.Context, f Fence, items []Item) error
	// Delete removes addrs atomically. Missing addresses are not an error.
	Delete(ctx context.Context, addrs []string) error
	// Scan calls fn for every stored address that begins with prefix, in no
	// particular order, and stops at the first error fn returns. It is used
	// only when a store is opened, never on the request path.
	Scan(ctx context.Context, prefix string, fn func(addr string) error) error
	// Close releases the storage. Data written before Close is durable.
	Close() error
}

// ErrClosed is returned by every method of a backend after Close.
var ErrClosed = errors.New("backend: closed")

// Pipeliner is a Backend that can issue a Write (or a WriteFenced) and
// then several Reads in one round trip, storage applying the write
// (atomically, as Write does) before it answers the Reads, in order.
type Pipeliner interface {
	Pipeline(ctx context.Context, items []Item, reads [][]string) ([][][]byte, error)
	// PipelineFenced is Pipeline with WriteFenced's write; a refused write
	// returns ErrFenced and no values.
	PipelineFenced(ctx context.Context, f Fence, items []Item, reads [][]string) ([][][]byte, error)
}

// Pipeline stores items in b (none: no Write) and then reads each address
// list of reads, returning their values in order: in one round trip where
// b is a Pipeliner, else as a Write and Reads one after the other. After
// an error the Write may or may not have been applied.
func Pipeline(ctx context.Context, b Backend, items []Item, reads [][]string) ([][][]byte, error) {
	if p, ok := b.(Pipeliner); ok {
		return p.Pipeline(ctx, items, reads)
	}
	if len(items) > 0 || len(reads) == 0 {
		if err := b.Write(ctx, items); err != nil {
			return nil, err
		}
	}
	return readEach(ctx, b, reads)
}

// readEach reads each address list of reads with its own Read, in order:
// the Reads of a Pipeline b cannot send in one round trip.
func readEach(ctx context.Context, b Backend, reads [][]string) ([][][]byte, error) {
	out := make([][][]byte, len(reads))
	for i, addrs := range reads {
		var err error
		if out[i], err = b.Read(ctx, addrs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Syncer is a Backend that can make every write it has acknowledged
// durable on demand, however it commits them one by one (the disk
// backend without per-write fsync, say).
type Syncer interface {
	Sync(ctx context.Context) error
}

// SyncDeferrer is a Backend that can stop making each write durable before
// acknowledging it, for a caller that journals every write it issues and
// redoes them after a crash (internal/durable): such a caller needs
// storage durable only at its checkpoints, which Sync provides.
type SyncDeferrer interface {
	// DeferSync stops the per-write sync; it reports whether the backend
	// did (a wrapper forwards it).
	DeferSync() bool
}

// DeferSync asks b to stop syncing each write (SyncDeferrer) and reports
// whether it did; other backends are left as they are.
func DeferSync(b Backend) bool {
	if d, ok := b.(SyncDeferrer); ok {
		return d.DeferSync()
	}
	return false
}

// Sync makes b's acknowledged writes durable when b is a Syncer. Any other
// backend's durability is its operator's (Redis persistence, for one), and
// Sync does nothing.
func Sync(ctx context.Context, b Backend) error {
	if s, ok := b.(Syncer); ok {
		return s.Sync(ctx)
	}
	return nil
}
