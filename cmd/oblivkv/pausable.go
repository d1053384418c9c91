package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/backup"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/kv"
)

// pausableStore is the store a server serves, which a backup pauses: it
// lets the operations in flight finish, holds new ones, closes the store
// (a checkpoint: storage's anchor names the journal's last position),
// copies it, opens it again and lets the held operations through.
type pausableStore struct {
	opts setup.Options
	log  *slog.Logger

	mu     sync.RWMutex // held shared by every operation, exclusively by a backup
	opened *setup.Opened
	// before holds the operation and backend counters of the stores
	// served before the last pause, so that INFO's counters (and what
	// bench derives from them) keep counting from the server's start.
	before kv.Stats
}

func newPausableStore(opened *setup.Opened, opts setup.Options, log *slog.Logger) *pausableStore {
	return &pausableStore{opened: opened, opts: opts, log: log}
}

func (p *pausableStore) store() kv.Store { return p.opened.Store }

func (p *pausableStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.store().Get(ctx, key)
}

func (p *pausableStore) Put(ctx context.Context, key string, val []byte) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.store().Put(ctx, key, val)
}

func (p *pausableStore) Delete(ctx context.Context, key string) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.store().Delete(ctx, key)
}

func (p *pausableStore) Update(ctx context.Context, key string, m kv.Mutation) (kv.Result, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return kv.Update(ctx, p.store(), key, m)
}

func (p *pausableStore) SetIfNoneExist(ctx context.Context, pairs []kv.Pair) (bool, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return kv.SetIfNoneExist(ctx, p.store(), pairs)
}

func (p *pausableStore) Stats() kv.Stats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return withCounters(p.store().Stats(), p.before)
}

// withCounters returns st with before's operation and backend counters
// added to its own.
func withCounters(st, before kv.Stats) kv.Stats {
	st.Gets += before.Gets
	st.Puts += before.Puts
	st.Deletes += before.Deletes
	st.Backend = st.Backend.Add(before.Backend)
	return st
}

// Close closes the store being served.
func (p *pausableStore) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opened.Close()
}

// backup writes an archive of the store to w. A disk store is paused
// while a snapshot of it is taken (backup.TakeSnapshot), and the archive
// is written from the snapshot once the store serves again; a store on
// Redis is paused while it is copied.
func (p *pausableStore) backup(ctx context.Context, w io.Writer) (backup.Contents, error) {
	if setup.BackendKind(p.opts.Backend) != "disk" {
		var c backup.Contents
		err := p.paused(ctx, func() (err error) {
			c, err = backup.Copy(ctx, p.opts, w, true)
			return err
		})
		return c, err
	}
	var snap *backup.Snapshot
	if err := p.paused(ctx, func() (err error) {
		snap, err = backup.TakeSnapshot(ctx, p.opts)
		return err
	}); err != nil {
		return backup.Contents{}, err
	}
	c, err := snap.Write(ctx, w)
	return c, errors.Join(err, snap.Remove())
}

// paused runs copy with the store closed (see pausableStore), and logs
// how long the pause took and what took it. A store that does not open
// again leaves every later operation failing (kv.ErrClosed), and the
// error says so.
func (p *pausableStore) paused(ctx context.Context, copy func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	began := time.Now()
	p.before = withCounters(p.opened.Store.Stats(), p.before)
	if err := p.opened.Close(); err != nil {
		return fmt.Errorf("closing the store for a backup: %w", err)
	}
	closed := time.Now()
	err := copy()
	copied := time.Now()
	opened, oerr := setup.Open(ctx, p.opts)
	if oerr == nil {
		oerr = kv.Prepare(ctx, opened.Store)
	}
	if oerr != nil {
		p.log.Error("the store did not open again after a backup: every request fails; restart the server", "err", oerr)
		return errors.Join(err, fmt.Errorf("the store did not open again after the backup: %w", oerr))
	}
	p.opened = opened
	p.log.Info("store paused for a backup", "paused_seconds", time.Since(began).Seconds(),
		"close_seconds", closed.Sub(began).Seconds(), "copy_seconds", copied.Sub(closed).Seconds(),
		"reopen_seconds", time.Since(copied).Seconds(), "err", err)
	return err
}
