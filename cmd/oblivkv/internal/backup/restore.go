package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/atomicfile"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// RestoreOptions say where an archive is restored to.
type RestoreOptions struct {
	DataDir string
	Backend string // setup.Options.Backend
	// Force restores over a data directory that holds a journal and over
	// storage that holds a newer copy of the store, another store, or
	// anything else: all of it is deleted first.
	Force bool
}

// Restored is what a restore did.
type Restored struct {
	Contents Contents
	Restore  kv.Restore
}

// Restore puts the store of the archive at path back: its storage, then
// its journal files, then the record of the restore in storage's
// metadata and in the data directory (setup.WriteRestored), and last
// opens the store once (it replays its journal if the copy held records
// after its checkpoint, and closes with a checkpoint: a new anchor).
// Nothing is written unless the archive is whole and its MAC matches
// under the data directory's key. A restore cut short leaves the data
// directory marked (setup.RestoringFile): a start refuses it, and a
// restore runs again over it without --force.
func Restore(ctx context.Context, path string, o RestoreOptions) (Restored, error) {
	keys, err := setup.LoadKeys(o.DataDir)
	if err != nil {
		return Restored{}, err
	}
	c, err := ReadFile(path, keys, Visitor{})
	if err != nil {
		return Restored{}, err
	}
	if _, ok := kv.Lookup(c.Header.Protocol); !ok {
		return Restored{}, fmt.Errorf("%w %q: this build cannot open the archive's store (known: %v)", kv.ErrUnknownProtocol, c.Header.Protocol, kv.Protocols())
	}
	again := restoring(o.DataDir)
	if err := checkDataDir(o.DataDir, o.Force || again); err != nil {
		return Restored{}, err
	}
	r := kv.Restore{At: c.Header.Anchor, Time: time.Now().UTC(), Digest: c.DigestHex()}
	if err := put(ctx, path, keys, c, r, o, again); err != nil {
		return Restored{}, err
	}
	opened, err := setup.Open(ctx, setup.Options{Backend: o.Backend, DataDir: o.DataDir})
	if err != nil {
		return Restored{}, fmt.Errorf("backup: the restored store does not open: %w", err)
	}
	if err := opened.Close(); err != nil {
		return Restored{}, fmt.Errorf("backup: closing the restored store: %w", err)
	}
	return Restored{Contents: c, Restore: r}, nil
}

// put writes the archive's storage and journal and the restore's record,
// between setting and clearing the restoring mark.
func put(ctx context.Context, path string, keys *seal.Keys, c Contents, r kv.Restore, o RestoreOptions, again bool) error {
	b, err := setup.OpenBackend(ctx, o.Backend, o.DataDir, false)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := checkStorage(ctx, b, keys, c.Header.Anchor, o.Force || again); err != nil {
		return err
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := atomicfile.Write(setup.RestoringFile(o.DataDir), nil, 0o600); err != nil {
		return fmt.Errorf("backup: marking the restore: %w", err)
	}
	jdir := setup.JournalDir(o.DataDir)
	if err := clearOld(ctx, b, o.DataDir); err != nil {
		return fmt.Errorf("backup: clearing the old store: %w", err)
	}
	if _, err := ReadFile(path, keys, Visitor{File: fileWriter(jdir), Items: func(items []backend.Item) error {
		return b.Write(ctx, items)
	}}); err != nil {
		return err
	}
	if err := backend.Sync(ctx, b); err != nil {
		return fmt.Errorf("backup: syncing restored storage: %w", err)
	}
	if err := kv.MarkRestored(ctx, b, keys, r); err != nil {
		return err
	}
	if err := backend.Sync(ctx, b); err != nil {
		return fmt.Errorf("backup: syncing restored storage: %w", err)
	}
	if err := setup.WriteRestored(o.DataDir, r); err != nil {
		return err
	}
	return os.Remove(setup.RestoringFile(o.DataDir))
}

// ReadFile reads the archive at path (Read).
func ReadFile(path string, keys *seal.Keys, v Visitor) (Contents, error) {
	f, err := os.Open(path)
	if err != nil {
		return Contents{}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	return Read(f, keys, v)
}

// restoring reports whether a restore into dataDir was cut short.
func restoring(dataDir string) bool {
	_, err := os.Stat(setup.RestoringFile(dataDir))
	return err == nil
}

// checkDataDir refuses, unless forced, a data directory holding a
// journal: a store of its own.
func checkDataDir(dataDir string, force bool) error {
	entries, err := os.ReadDir(setup.JournalDir(dataDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("backup: %w", err)
	}
	if len(entries) > 0 && !force {
		return fmt.Errorf("backup: %s already holds a journal (a store's trusted state): restore into an empty data dir, or give --force to replace it", dataDir)
	}
	return nil
}

// checkStorage refuses, unless forced, storage holding anything but this
// store at a position no newer than at.
func checkStorage(ctx context.Context, b backend.Backend, keys *seal.Keys, at uint64, force bool) error {
	if force {
		return nil
	}
	exists, err := kv.Probe(ctx, b)
	if err != nil {
		return err
	}
	if !exists {
		n, err := countAddrs(ctx, b)
		if err == nil && n > 0 {
			err = fmt.Errorf("backup: the storage holds %d addresses and no store: give --force to delete them and restore", n)
		}
		return err
	}
	if _, _, err := kv.Describe(ctx, b, keys); errors.Is(err, kv.ErrWrongKey) {
		return errors.New("backup: the storage holds another store (its metadata does not open under this key): give --force to delete it and restore")
	} else if err != nil {
		return err
	}
	anchor, _, err := durable.ReadAnchor(ctx, b, keys)
	if err != nil {
		return err
	}
	if anchor > at {
		return fmt.Errorf("backup: the storage holds this store at journal position %d, newer than the archive's %d: restoring would lose what was written since; give --force to restore anyway", anchor, at)
	}
	return nil
}

// clearOld deletes what storage and the data directory held of a store.
func clearOld(ctx context.Context, b backend.Backend, dataDir string) error {
	if err := clearStorage(ctx, b); err != nil {
		return err
	}
	if err := os.RemoveAll(setup.JournalDir(dataDir)); err != nil {
		return err
	}
	if err := os.Remove(setup.RestoredFile(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// countAddrs counts the addresses b holds.
func countAddrs(ctx context.Context, b backend.Backend) (int, error) {
	n := 0
	err := b.Scan(ctx, "", func(string) error { n++; return nil })
	return n, err
}

// clearBatch is how many addresses clearStorage deletes at once.
const clearBatch = 1000

// clearStorage deletes every address b holds.
func clearStorage(ctx context.Context, b backend.Backend) error {
	var addrs []string
	if err := b.Scan(ctx, "", func(a string) error { addrs = append(addrs, a); return nil }); err != nil {
		return err
	}
	for len(addrs) > 0 {
		n := min(len(addrs), clearBatch)
		if err := b.Delete(ctx, addrs[:n]); err != nil {
			return err
		}
		addrs = addrs[n:]
	}
	return nil
}

// fileWriter writes each journal file under dir, synced.
func fileWriter(dir string) func(name string, size int64, r io.Reader) error {
	return func(name string, _ int64, r io.Reader) error {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		_, err = io.Copy(f, r)
		if err == nil {
			err = f.Sync()
		}
		if err = errors.Join(err, f.Close()); err != nil {
			return fmt.Errorf("backup: writing %s: %w", path, err)
		}
		return atomicfile.SyncDir(filepath.Dir(path))
	}
}
