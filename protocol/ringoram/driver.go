package ringoram

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// Driver runs a Tree's operations on a backend: it issues the I/O each
// step of the Tree names (step.go), seals what the Tree writes and opens
// what storage returns, and calls the owner's hooks (Config.ReadAhead,
// Config.WriteAhead). Its Tree is embedded: the trusted state and its
// accessors are the Tree's. It is not safe for concurrent use, but for
// Abandon.
type Driver struct {
	*Tree
	b          backend.Backend
	keys       *seal.Keys
	codec      *tree.Codec
	readAhead  ReadAhead
	writeAhead WriteAhead
	held       heldWrites    // committed operations' Writes not on storage yet (Hold)
	redoing    bool          // a Redo runs: no hook is called, its Write is issued at once
	retries    atomic.Uint64 // slot Reads issued again (Stats.ReadRetries)

	abandon     chan struct{} // closed by Abandon: slot Reads are no longer retried
	abandonOnce sync.Once
}

// NewDriver returns a Driver of a new Tree (NewTree) over cfg.Backend. It
// does no I/O.
func NewDriver(cfg Config) (*Driver, error) {
	t, err := NewTree(cfg)
	if err != nil {
		return nil, err
	}
	return DriverOf(t, cfg)
}

// DriverOf returns a Driver of t, a Tree of cfg, over cfg.Backend: a
// replicated tree's leader drives the Tree its replica applies entries
// to. It does no I/O.
func DriverOf(t *Tree, cfg Config) (*Driver, error) {
	if cfg.Backend == nil || cfg.Keys == nil {
		return nil, errors.New("ringoram: Config needs a Backend and Keys")
	}
	return &Driver{Tree: t, b: cfg.Backend, keys: cfg.Keys,
		codec:     tree.NewCodec(cfg.Keys, cfg.Params.slots(), cfg.ValueSize),
		readAhead: cfg.ReadAhead, writeAhead: cfg.WriteAhead, abandon: make(chan struct{})}, nil
}

// Abandon makes a slot Read that storage keeps failing give up: the
// operation retrying it fails at its next attempt instead of waiting for
// storage (readAgain). A store calls it when it closes. Unlike the rest of
// the Driver, it is safe to call from any goroutine.
func (d *Driver) Abandon() { d.abandonOnce.Do(func() { close(d.abandon) }) }

// Stats returns the Tree's counters and the slot Reads issued again.
func (d *Driver) Stats() Stats {
	s := d.Tree.Stats()
	s.ReadRetries += d.retries.Load()
	return s
}

// ReadEvict is a multi-path read (ReadPaths) followed by an eviction of
// the next k paths (Evict), in one round trip: its two slot Reads go to
// storage together (backend.Pipeline), then ONE atomic Write holds both.
// The calls are those of ReadPaths, except that its slot Read is followed
// by the eviction's, and:
//
//   - the eviction's Read takes Z slots of each bucket of its union as
//     Evict does, from what the multi-path read left: a bucket both read
//     and evicted gives the multi-path read its min(c, Z) slots and the
//     eviction Z others;
//   - a bucket of the eviction's union is never reshuffled early: the
//     eviction rewrites it in the same Write;
//   - the Write holds the metadata of every bucket of both unions, and all
//     the slots of the buckets reshuffled and of the eviction's union.
//
// Both unions depend only on the leaves read and on k, as each
// operation's does alone, so storage learns what it would from the two
// one after the other, in one round trip instead of two (Treebeard Sec.
// 5.3: the eviction follows the read it is owed after, and nothing
// between them reaches storage). The eviction places the blocks offered
// and those it reads, not the blocks the multi-path read takes out: those
// go to their requests, and to a later eviction. k = 0 is ReadPaths;
// no reqs is Evict; neither does nothing. It returns ReadPaths' results
// and Evict's placements.
func (d *Driver) ReadEvict(ctx context.Context, reqs []PathRead, k int, blocks []Block) ([]ReadResult, []int64, error) {
	w, err := d.readEvict(ctx, reqs, k, blocks)
	return w.Results, w.Where, err
}

// readEvict is ReadEvict, returning the operation's whole Write.
func (d *Driver) readEvict(ctx context.Context, reqs []PathRead, k int, blocks []Block) (Write, error) {
	p, err := d.Start(reqs, k, blocks)
	if err != nil || !d.InProgress() {
		return Write{}, err
	}
	if d.readAhead != nil && !d.redoing {
		if err := d.readAhead(ctx, p); err != nil {
			d.Discard(p)
			return Write{}, err
		}
	}
	if cold := d.MetaReads(); len(cold) > 0 {
		plains, err := d.ReadMetas(ctx, cold)
		if err != nil {
			d.Discard(p)
			return Write{}, err
		}
		if err := d.LearnMetas(plains); err != nil {
			return Write{}, err
		}
	}
	reals, err := d.ReadSlots(ctx, d.SlotReads())
	if err != nil {
		d.Discard(p)
		return Write{}, err
	}
	w, err := d.LearnSlots(reals)
	if err != nil {
		return Write{}, err
	}
	return w, d.writeChange(ctx, p, w)
}

// writeChange seals the operation's Write, hands its Change to the
// write-ahead hook, if any, then issues the Write and commits. Without a
// hook (or in a Redo) a failed Write fails the operation and changes
// nothing but the Tree's copies of the buckets' metadata. With one, the
// operation is committed once the hook returns (a crash would redo it),
// and returns at once: its Write goes to storage with the tree's next
// Read, in one round trip that applies the Write first
// (backend.Pipeline), or on its own at Flush, whichever comes first.
func (d *Driver) writeChange(ctx context.Context, p Plan, w Write) error {
	items, err := d.Seal(w.Buckets)
	if err != nil {
		d.Discard(p)
		return err
	}
	if d.writeAhead == nil || d.redoing {
		if err := d.b.Write(ctx, items); err != nil {
			d.WriteFailed()
			return err
		}
		return d.Commit()
	}
	if err := d.writeAhead(ctx, w.Change); err != nil {
		d.Discard(p)
		return err
	}
	d.Hold(items)
	return d.Commit()
}

// Hold makes items, a committed operation's sealed Write, go to storage
// with the tree's next Read (backend.Pipeline), or on its own at Flush,
// after the Writes held before it.
func (d *Driver) Hold(items []backend.Item) { d.HoldUntil(items, nil) }

// HoldUntil is Hold for a Write whose record is journaled but not yet
// durable: durable, called before items go out, makes it so. The next
// operation's record, synced before its first Read, usually has made it
// durable already, so the operation's own record costs no fsync.
func (d *Driver) HoldUntil(items []backend.Item, durable func() error) {
	d.held.hold(items, durable)
}

// Flush issues the Writes of the committed operations that have not
// reached storage yet: before the Tree's state is checkpointed, and when
// its owner has nothing else to do.
func (d *Driver) Flush(ctx context.Context) error { return d.settle(ctx) }

// settle issues the Writes of committed operations that have not reached
// storage (held for the next Read, or failed with it).
func (d *Driver) settle(ctx context.Context) error {
	items, err := d.held.take()
	if err != nil || len(items) == 0 {
		return err
	}
	if err := d.b.Write(ctx, items); err != nil {
		d.held.giveBack(items)
		return fmt.Errorf("ringoram: writing back the previous operation: %w", err)
	}
	return nil
}
