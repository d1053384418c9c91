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
// write writes, which need not fit in memory; an error of write leaves
// path as it was.
func WriteStream(path string, mode os.FileMode, write func(io.Writer) error) error {
	f, err := Create(path, mode)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// File is a file being written in place of path: nothing shows at path
// until Commit, and Abort leaves nothing behind.
type File struct {
	*os.File
	path string
}

// Create begins a File that replaces (or creates) path, with permission
// mode.
func Create(path string, mode os.FileMode) (*File, error) {
	f, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return nil, err
	}
	return &File{File: f, path: path}, nil
}

// Commit syncs what was written and puts it at path durably. On failure
// nothing is left at the temporary name.
func (f *File) Commit() error {
	err := f.Sync()
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(f.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return SyncDir(filepath.Dir(f.path))
}

// Abort discards what was written.
func (f *File) Abort() {
	f.Close()
	os.Remove(f.Name())
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
