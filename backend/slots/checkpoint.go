package slots

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/oblivkv/oblivkv/backend"
)

// Checkpoint writes a consistent copy of the store into dir, which must
// not exist: after a sync point, a copy of every slot file and of the
// record of the sync point. Every other call waits meanwhile, and the
// copy takes time in proportion to the store's size (slot files are
// rewritten, so they cannot be hard-linked as pebble's tables are). A
// store opened ReadOnly cannot be checkpointed.
func (b *Backend) Checkpoint(ctx context.Context, dir string) error {
	if b.readOnly {
		return ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	if err := b.checkpoint(dir); err != nil {
		return fmt.Errorf("slots: checkpoint: %w", err)
	}
	return nil
}

func (b *Backend) checkpoint(dir string) error {
	if _, err := b.fs.Stat(dir); err == nil {
		return fmt.Errorf("%s exists", dir)
	}
	if err := b.sync(); err != nil {
		return err
	}
	if err := makeDir(b.fs, dir); err != nil {
		return err
	}
	if err := copyFile(b.fs, filepath.Join(b.dir, syncedFile), filepath.Join(dir, syncedFile)); err != nil {
		return err
	}
	for _, c := range b.cs.all() {
		if err := copyFile(b.fs, classFile(b.dir, c.size), classFile(dir, c.size)); err != nil {
			return err
		}
	}
	return syncDir(b.fs, dir)
}

// copyFile copies from to a new file to, durably.
func copyFile(fs vfs.FS, from, to string) error {
	if err := vfs.Copy(fs, from, to); err != nil {
		return err
	}
	return syncClose(fs.Open(to))
}
