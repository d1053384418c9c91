package setup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/atomicfile"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// A data directory a store was restored into (oblivkv restore) keeps
// beside its journal what its storage's metadata records of the restore
// (DIR/restored): a start refuses storage that records another restore,
// or none, so storage from before the restore (which recorded none) is
// refused however far the journal has moved on since. DIR/restoring
// exists while a restore writes the store, and a start refuses the
// directory until a restore has finished.

// RestoredFile returns the path of a data directory's record of the
// restore its store came from.
func RestoredFile(dataDir string) string { return filepath.Join(dataDir, "restored") }

// RestoringFile returns the path of the marker of a restore in progress.
func RestoringFile(dataDir string) string { return filepath.Join(dataDir, "restoring") }

// ReadRestored returns the restore a data directory records (nil: none).
func ReadRestored(dataDir string) (*kv.Restore, error) {
	b, err := os.ReadFile(RestoredFile(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	var r kv.Restore
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("setup: %s: %w", RestoredFile(dataDir), err)
	}
	return &r, nil
}

// WriteRestored records, durably, that the data directory's store was
// restored as r says.
func WriteRestored(dataDir string, r kv.Restore) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(RestoredFile(dataDir), b, 0o600); err != nil {
		return fmt.Errorf("setup: recording the restore: %w", err)
	}
	return nil
}

// checkNotRestoring refuses a data directory a restore is writing, or
// left unfinished.
func checkNotRestoring(dataDir string) error {
	if dataDir == "" {
		return nil
	}
	if _, err := os.Stat(RestoringFile(dataDir)); err == nil {
		return fmt.Errorf("setup: a restore into %s has not finished: run `oblivkv restore` again (with --force)", dataDir)
	}
	return nil
}

// checkRestored requires the restore storage records (stored) to be the
// one the data directory records: storage from before a restore, or a
// data directory from before it, is refused as rolled back.
func checkRestored(ctx context.Context, b backend.Backend, keys *seal.Keys, opts Options, stored *kv.Restore) error {
	if opts.DataDir == "" || opts.Backend == "mem" {
		return nil
	}
	mine, err := ReadRestored(opts.DataDir)
	if err != nil || mine.Same(stored) {
		return err
	}
	switch {
	case mine == nil:
		return fmt.Errorf("%w: storage was restored from a backup at journal position %d, and the data dir %s is from before that restore", kv.ErrRollback, stored.At, opts.DataDir)
	case stored == nil:
		anchor, _, err := durable.ReadAnchor(ctx, b, keys)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: the data dir %s was restored from a backup at journal position %d, and storage (at journal position %d) is from before that restore", kv.ErrRollback, opts.DataDir, mine.At, anchor)
	}
	return fmt.Errorf("%w: the data dir %s was restored from a backup at journal position %d (%s), storage from another at %d (%s)", kv.ErrRollback, opts.DataDir, mine.At, mine.Time.Format("2006-01-02 15:04:05"), stored.At, stored.Time.Format("2006-01-02 15:04:05"))
}
