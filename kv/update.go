package kv

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
)

// keyLocks serialises read-modify-writes with the writes of their key,
// for a protocol that cannot apply a Mutation inside one access: Update
// then takes its key's stripe exclusively around a Get and a Put, and
// Put and Delete take it shared. Gets take nothing: they see the state
// before a read-modify-write or after it, never between.
type keyLocks struct {
	seed    maphash.Seed
	stripes [256]sync.RWMutex
}

func (l *keyLocks) of(key string) *sync.RWMutex {
	return &l.stripes[maphash.String(l.seed, key)%uint64(len(l.stripes))]
}

// writeStripe returns key's stripe, which a Put or a Delete holds shared;
// nil when the protocol applies mutations itself.
func (c *checked) writeStripe(key string) *sync.RWMutex {
	if c.native != nil {
		return nil
	}
	return c.locks.of(key)
}

// Update applies m to key: in the protocol's one access when it
// implements Updater, otherwise as a Get and then a Put or a Delete,
// whatever the mutation's outcome, so that the outcome does not show in
// the calls.
func (c *checked) Update(ctx context.Context, key string, m Mutation) (Result, error) {
	if err := c.checkKey(key); err != nil {
		return Result{}, err
	}
	if m.Op == MutSet {
		if err := c.checkValue(m.Arg); err != nil {
			return Result{}, err
		}
	}
	if err := c.enter(); err != nil {
		return Result{}, err
	}
	defer c.mu.RUnlock()
	c.count(m.Op)
	return c.update(ctx, key, m)
}

// update applies m, c.mu held.
func (c *checked) update(ctx context.Context, key string, m Mutation) (Result, error) {
	switch {
	case c.native != nil:
		return c.native.Update(ctx, key, m)
	case m.Op == MutRead:
		old, found, err := c.inner.Get(ctx, key)
		return Result{Found: found, Old: old, Exists: found, Len: len(old)}, err
	}
	l := c.locks.of(key)
	l.Lock()
	defer l.Unlock()
	old, found, err := c.inner.Get(ctx, key)
	if err != nil {
		return Result{}, err
	}
	next, exists, r, applyErr := m.Apply(old, found, c.valueSize)
	if exists {
		err = c.inner.Put(ctx, key, next)
	} else {
		err = c.inner.Delete(ctx, key)
	}
	if err = errors.Join(applyErr, err); err != nil {
		return Result{Found: found}, err
	}
	return r, nil
}

func (c *checked) count(op MutationOp) {
	switch op {
	case MutRead:
		c.gets.Add(1)
	case MutDelete:
		c.deletes.Add(1)
	default:
		c.puts.Add(1)
	}
}

// SetIfNoneExist runs alone (it holds c.mu exclusively, as Close does):
// it reads every key, then sets every pair if none existed and reads
// every key again otherwise, so that it costs storage the same either
// way. A new key it cannot make room for fails it before any is set.
func (c *checked) SetIfNoneExist(ctx context.Context, pairs []Pair) (bool, error) {
	for _, p := range pairs {
		if err := errors.Join(c.checkKey(p.Key), c.checkValue(p.Value)); err != nil {
			return false, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false, ErrClosed
	}
	none, err := c.noneExist(ctx, pairs)
	if err != nil {
		return false, err
	}
	var full error
	if none && int(c.inner.Stats().Keys)+distinct(pairs) > c.capacity {
		full = fmt.Errorf("%w: %d keys", ErrFull, c.capacity)
	}
	set := none && full == nil
	for _, p := range pairs {
		if set {
			c.puts.Add(1)
			err = c.inner.Put(ctx, p.Key, p.Value)
		} else {
			c.gets.Add(1)
			_, _, err = c.inner.Get(ctx, p.Key)
		}
		if err != nil {
			return false, err
		}
	}
	return set, full
}

func (c *checked) noneExist(ctx context.Context, pairs []Pair) (bool, error) {
	none := true
	for _, p := range pairs {
		c.gets.Add(1)
		_, found, err := c.inner.Get(ctx, p.Key)
		if err != nil {
			return false, err
		}
		none = none && !found
	}
	return none, nil
}

func distinct(pairs []Pair) int {
	keys := make(map[string]struct{}, len(pairs))
	for _, p := range pairs {
		keys[p.Key] = struct{}{}
	}
	return len(keys)
}
