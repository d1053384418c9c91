// Package atomicfile writes a whole file durably, so that a crash leaves
// either the old file or the new one, never part of the new one: to a
// temporary name beside it, synced, renamed into place, and the directory
// synced so the rename itself survives.
//
// It owns nothing but that sequence; it never reads what it writes and
// never logs a file's content.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces (or creates) path with data, with permission mode.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteStream(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteStream replaces (or creates) path, with permission mode, with what
// write writes, which need not fit in memory: to path.tmp, synced, then
// renamed. An error of write, or of any step, leaves path as it was and
// nothing at path.tmp.
func WriteStream(path string, mode os.FileMode, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes the entries of dir (files created, renamed or removed in
// it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
