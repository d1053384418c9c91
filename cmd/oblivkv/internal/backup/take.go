package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/atomicfile"
	"github.com/oblivkv/oblivkv/internal/durable"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// Source is a store to copy, which nothing writes while it is copied.
type Source struct {
	// JournalDir is the store's journal directory, copied file by file.
	JournalDir string
	// Storage is the store's storage, copied address by address.
	Storage backend.Backend
	Keys    *seal.Keys
	// Kind is the storage's kind for the header ("disk", "redis").
	Kind        string
	Incarnation uint64
	Online      bool
}

// Write writes an archive of src to w and returns what it holds.
func Write(ctx context.Context, w io.Writer, src Source) (Contents, error) {
	h, err := header(ctx, src)
	if err != nil {
		return Contents{}, err
	}
	aw, err := NewWriter(w, h, src.Keys)
	if err != nil {
		return Contents{}, err
	}
	if err := writeJournal(aw, src.JournalDir); err != nil {
		return Contents{}, err
	}
	if err := backend.ReadAll(ctx, src.Storage, "", 0, aw.Items); err != nil {
		return Contents{}, fmt.Errorf("backup: copying storage: %w", err)
	}
	sum, digest, err := aw.Close()
	return Contents{Header: h, Summary: sum, Digest: digest, MACChecked: true}, err
}

// header describes src's store from its metadata record and anchor.
func header(ctx context.Context, src Source) (Header, error) {
	cfg, exists, err := kv.Describe(ctx, src.Storage, src.Keys)
	if err != nil {
		return Header{}, err
	}
	if !exists {
		return Header{}, errors.New("backup: the storage holds no store")
	}
	anchor, _, err := durable.ReadAnchor(ctx, src.Storage, src.Keys)
	if err != nil {
		return Header{}, err
	}
	return Header{Protocol: cfg.Protocol, Capacity: cfg.Capacity, ValueSize: cfg.ValueSize,
		MaxKeySize: cfg.MaxKeySize, Options: cfg.OptionSettings,
		Fingerprint: kv.OptionsFingerprint(cfg.Protocol, cfg.OptionSettings), Anchor: anchor,
		Incarnation: src.Incarnation, Time: time.Now().UTC(), Backend: src.Kind, Online: src.Online}, nil
}

// writeJournal adds every file of the journal directory but its locks
// and its free files (journal.FreeFile), in lexical order.
func writeJournal(aw *Writer, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "LOCK" {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || journal.FreeFile(rel) {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		return aw.File(filepath.ToSlash(rel), info.Size(), f)
	})
}

// WriteFile writes the archive write makes to path, through path.tmp,
// synced and renamed into place, so path is a whole archive or absent.
func WriteFile(path string, write func(io.Writer) (Contents, error)) (Contents, error) {
	var c Contents
	err := atomicfile.WriteStream(path, 0o600, func(w io.Writer) (err error) {
		c, err = write(w)
		return err
	})
	if err != nil {
		return Contents{}, fmt.Errorf("backup: writing %s: %w", path, err)
	}
	return c, nil
}

// ErrInUse reports a store a running server holds: its backup must go
// through the server.
var ErrInUse = errors.New("backup: a server holds the store")

// Stopped writes an archive of the stopped store of opts (DataDir,
// Backend) to path (Copy).
func Stopped(ctx context.Context, opts setup.Options, path string) (Contents, error) {
	return WriteFile(path, func(w io.Writer) (Contents, error) { return Copy(ctx, opts, w, false) })
}

// Copy writes an archive of the store of opts (DataDir, Backend), which
// no process holds open, to w. It holds the journal's lock while it
// copies, so no server starts meanwhile; a store a process holds is
// ErrInUse. A store that crashed is copied as it is: a restore replays
// its journal. online marks an archive a server took of its own store.
func Copy(ctx context.Context, opts setup.Options, w io.Writer, online bool) (Contents, error) {
	jdir := setup.JournalDir(opts.DataDir)
	if _, err := os.Stat(jdir); err != nil {
		return Contents{}, fmt.Errorf("backup: no store's journal in %s: %w", opts.DataDir, err)
	}
	lock, err := journal.Lock(jdir)
	if err != nil {
		return Contents{}, fmt.Errorf("%w (%w)", ErrInUse, err)
	}
	defer lock.Close()
	keys, err := setup.LoadKeys(opts.DataDir)
	if err != nil {
		return Contents{}, err
	}
	inc, err := journal.LastIncarnation(jdir, keys)
	if err != nil {
		return Contents{}, err
	}
	b, err := setup.OpenBackendReadOnly(ctx, opts.Backend, opts.DataDir)
	if err != nil {
		return Contents{}, err
	}
	defer b.Close()
	return Write(ctx, w, Source{JournalDir: jdir, Storage: b, Keys: keys, Kind: setup.BackendKind(opts.Backend),
		Incarnation: inc, Online: online})
}
