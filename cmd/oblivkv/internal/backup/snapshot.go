package backup

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/seal"
)

// A Snapshot is a copy of a stopped disk store in its data directory
// (SnapshotDir): the journal's files copied, and a checkpoint of
// DIR/store (on the slots engine a copy of its files; on pebble hard
// links to its tables, which takes a moment whatever the store's size).
// A server takes one while its store is paused and writes the archive
// from it once it serves again. Redis offers no such copy: a server
// copies a Redis store while it is paused (Copy).
type Snapshot struct {
	dir         string
	keys        *seal.Keys
	incarnation uint64
}

// SnapshotDir returns the directory of a data directory's snapshot.
func SnapshotDir(dataDir string) string { return filepath.Join(dataDir, "backup-snapshot") }

// TakeSnapshot copies the stopped disk store of opts into its snapshot
// directory, replacing one a server that died left there. It holds the
// journal's lock while it copies.
func TakeSnapshot(ctx context.Context, opts setup.Options) (*Snapshot, error) {
	s := &Snapshot{dir: SnapshotDir(opts.DataDir)}
	if err := os.RemoveAll(s.dir); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	jdir := setup.JournalDir(opts.DataDir)
	lock, err := journal.Lock(jdir)
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", ErrInUse, err)
	}
	defer lock.Close()
	if s.keys, err = setup.LoadKeys(opts.DataDir); err != nil {
		return nil, err
	}
	if s.incarnation, err = journal.LastIncarnation(jdir, s.keys); err != nil {
		return nil, err
	}
	if err := os.CopyFS(s.journalDir(), withoutFree{os.DirFS(jdir)}); err != nil {
		return nil, fmt.Errorf("backup: copying the journal: %w", s.removeAfter(err))
	}
	// Not read-only: neither engine checkpoints a store opened read-only
	// (pebble's has no options file of its own to link).
	b, err := setup.OpenDiskStore(filepath.Join(opts.DataDir, "store"), false)
	if err != nil {
		return nil, s.removeAfter(err)
	}
	defer b.Close()
	if err := b.Checkpoint(ctx, s.storeDir()); err != nil {
		return nil, s.removeAfter(err)
	}
	return s, nil
}

// withoutFree is a journal directory's file system without its free
// files (journal.FreeFile): garbage, which the store's pause need not
// spend time copying.
type withoutFree struct{ fs.FS }

// ReadDir lists the directory name but its free files.
func (f withoutFree) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(f.FS, name)
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return journal.FreeFile(path.Join(name, e.Name())) }), err
}

func (s *Snapshot) journalDir() string { return filepath.Join(s.dir, "journal") }
func (s *Snapshot) storeDir() string   { return filepath.Join(s.dir, "store") }

// removeAfter removes the snapshot after err.
func (s *Snapshot) removeAfter(err error) error {
	os.RemoveAll(s.dir)
	return err
}

// Write writes an archive of the snapshot to w.
func (s *Snapshot) Write(ctx context.Context, w io.Writer) (Contents, error) {
	b, err := setup.OpenDiskStore(s.storeDir(), true)
	if err != nil {
		return Contents{}, fmt.Errorf("backup: the snapshot: %w", err)
	}
	defer b.Close()
	return Write(ctx, w, Source{JournalDir: s.journalDir(), Storage: b, Keys: s.keys, Kind: "disk",
		Incarnation: s.incarnation, Online: true})
}

// Remove deletes the snapshot.
func (s *Snapshot) Remove() error { return os.RemoveAll(s.dir) }
