package kv

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/oblivkv/oblivkv/observe"
)

// checked wraps a protocol's Store with what every store shares: size
// checks, the closed state, operation counters and backend counters.
type checked struct {
	inner      Store
	tap        *observe.Tap
	journal    Journal       // closed after inner, if any
	engine     func() []Stat // the storage engine's figures, if any
	protocol   string
	capacity   int
	valueSize  int
	maxKeySize int

	// native applies mutations inside one access (nil: the protocol
	// does not, and locks serialises them with the writes of their key).
	native Updater
	locks  *keyLocks

	mu     sync.RWMutex // held shared by every call, exclusively by Close and SetIfNoneExist
	closed bool

	gets, puts, deletes atomic.Uint64
}

// WithChecks returns inner with what every store opened by Open has
// around it (size checks against cfg's value and key sizes, the closed
// state, operation counters, mutations of stores that cannot apply them
// in one access): for a store made elsewhere, such as a cluster's router.
func WithChecks(inner Store, cfg Config) Store { return newChecked(inner, nil, cfg) }

func newChecked(inner Store, tap *observe.Tap, cfg Config) *checked {
	c := &checked{inner: inner, tap: tap, protocol: cfg.Protocol, engine: cfg.EngineStats,
		capacity: cfg.Capacity, valueSize: cfg.ValueSize, maxKeySize: cfg.MaxKeySize}
	if u, ok := inner.(Updater); ok {
		c.native = u
	} else {
		c.locks = &keyLocks{seed: maphash.MakeSeed()}
	}
	return c
}

func (c *checked) enter() error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (c *checked) checkKey(key string) error {
	if len(key) > c.maxKeySize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), c.maxKeySize)
	}
	return nil
}

func (c *checked) checkValue(val []byte) error {
	if len(val) > c.valueSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(val), c.valueSize)
	}
	return nil
}

func (c *checked) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := c.checkKey(key); err != nil {
		return nil, false, err
	}
	if err := c.enter(); err != nil {
		return nil, false, err
	}
	defer c.mu.RUnlock()
	c.gets.Add(1)
	return c.inner.Get(ctx, key)
}

func (c *checked) Put(ctx context.Context, key string, val []byte) error {
	if err := errors.Join(c.checkKey(key), c.checkValue(val)); err != nil {
		return err
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if l := c.writeStripe(key); l != nil {
		l.RLock()
		defer l.RUnlock()
	}
	c.puts.Add(1)
	return c.inner.Put(ctx, key, val)
}

func (c *checked) Delete(ctx context.Context, key string) error {
	if err := c.checkKey(key); err != nil {
		return err
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if l := c.writeStripe(key); l != nil {
		l.RLock()
		defer l.RUnlock()
	}
	c.deletes.Add(1)
	return c.inner.Delete(ctx, key)
}

// Load implements Loader when the protocol does.
func (c *checked) Load(ctx context.Context, items iter.Seq2[string, []byte]) (int, error) {
	loader, ok := c.inner.(Loader)
	if !ok {
		return 0, fmt.Errorf("kv: protocol %s has no bulk loader", c.protocol)
	}
	if err := c.enter(); err != nil {
		return 0, err
	}
	defer c.mu.RUnlock()
	var bad error
	valid := func(yield func(string, []byte) bool) {
		for k, v := range items {
			if bad = errors.Join(c.checkKey(k), c.checkValue(v)); bad != nil {
				bad = fmt.Errorf("key %q: %w", k, bad)
				return
			}
			if !yield(k, v) {
				return
			}
		}
	}
	n, err := loader.Load(ctx, valid)
	if bad != nil {
		return n, bad
	}
	return n, err
}

func (c *checked) Stats() Stats {
	s := c.inner.Stats()
	s.Protocol = c.protocol
	s.Capacity, s.ValueSize, s.MaxKeySize = c.capacity, c.valueSize, c.maxKeySize
	s.Gets, s.Puts, s.Deletes = c.gets.Load(), c.puts.Load(), c.deletes.Load()
	if c.tap != nil { // a store made elsewhere (WithChecks) counts its own storage's calls, if any
		s.Backend = c.tap.Counters()
	}
	if c.journal != nil {
		js := c.journal.Stats()
		s.Extra = append(s.Extra,
			Stat{Name: StatJournalRecords, Value: float64(js.Records)},
			Stat{Name: StatJournalBytes, Value: float64(js.Bytes)},
			Stat{Name: StatJournalFsyncs, Value: float64(js.Fsyncs)},
			Stat{Name: StatJournalCheckpoints, Value: float64(js.Checkpoints)},
			Stat{Name: StatJournalSegmentsReused, Value: float64(js.SegmentsReused)})
	}
	if c.engine != nil {
		s.Extra = append(s.Extra, c.engine()...)
	}
	return s
}

func (c *checked) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.closed = true
	err := c.inner.Close()
	if c.journal != nil {
		err = errors.Join(err, c.journal.Close())
	}
	return err
}

// AsLoader returns s's bulk loader, if its protocol has one.
func AsLoader(s Store) (Loader, bool) {
	if c, ok := s.(*checked); ok {
		_, has := c.inner.(Loader)
		return c, has
	}
	l, ok := s.(Loader)
	return l, ok
}

// StoredKeys implements KeyLister when the protocol does.
func (c *checked) StoredKeys(ctx context.Context) ([]string, error) {
	lister, ok := c.inner.(KeyLister)
	if !ok {
		return nil, fmt.Errorf("kv: protocol %s cannot name its keys", c.protocol)
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.mu.RUnlock()
	return lister.StoredKeys(ctx)
}

// AsKeyLister returns what names s's keys, if its protocol can.
func AsKeyLister(s Store) (KeyLister, bool) {
	if c, ok := s.(*checked); ok {
		_, has := c.inner.(KeyLister)
		return c, has
	}
	l, ok := s.(KeyLister)
	return l, ok
}

// Preparer is implemented by protocols that build their storage layout
// lazily (at the first access or bulk load, so it is written once).
type Preparer interface {
	// Prepare builds the layout now if it is not built yet.
	Prepare(ctx context.Context) error
}

// Prepare builds s's storage layout now, if its protocol builds it lazily,
// so that a server's first request does not pay for it. It does nothing
// for other protocols.
func Prepare(ctx context.Context, s Store) error {
	if c, ok := s.(*checked); ok {
		if err := c.enter(); err != nil {
			return err
		}
		defer c.mu.RUnlock()
		s = c.inner
	}
	if p, ok := s.(Preparer); ok {
		return p.Prepare(ctx)
	}
	return nil
}
