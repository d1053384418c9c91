package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/backup"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/seal"
)

func newBackupCmd() *cobra.Command {
	var opts setup.Options
	var to string
	cmd := &cobra.Command{
		Use:   "backup --data-dir DIR [--backend SPEC] --to PATH",
		Short: "Write one archive of a store's trusted state and storage, which `oblivkv restore` puts back",
		Long: `Write one archive of a store: the files of DIR/journal (its trusted state, sealed
as they are) and every address of its storage with its stored bytes (sealed as
they are), as of one journal position (the anchor's), with a SHA-256 digest and
a MAC under a key derived from the store's master key. The key itself is not in
the archive: keep DIR/key (or $OBLIVKV_KEY) apart from it.

A stopped store is copied while this command holds its directory's lock, so no
server starts meanwhile. A store a server holds is copied through that server
(DIR/backup.sock, which only the data directory's owner reaches): the server
holds new commands, lets those in flight finish, closes its store (a
checkpoint), copies it (on disk only a snapshot, taken in a moment; on Redis
all of storage) and serves again; the archive streams to this command, which
checks it and writes it. The server logs how long its store was paused.

Storage is read address by address, each once, in address order: what storage
sees is a function of how many addresses it holds, never of the keys. The
archive is written to PATH.tmp, synced, and renamed to PATH.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := takeBackup(cmd, opts, to)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up to %s\n", to)
			printContents(cmd.OutOrStdout(), c)
			return nil
		},
	}
	registerLocation(cmd, &opts.Backend, &opts.DataDir)
	cmd.Flags().StringVar(&to, "to", "", "path of the archive to write")
	cmd.MarkFlagRequired("to")
	cmd.AddCommand(newBackupVerifyCmd())
	return cmd
}

// takeBackup copies the store of opts to path: directly when it is
// stopped, through its server when one holds it.
func takeBackup(cmd *cobra.Command, opts setup.Options, path string) (backup.Contents, error) {
	c, err := backup.Stopped(cmd.Context(), opts, path)
	if errors.Is(err, backup.ErrInUse) {
		return backup.Fetch(cmd.Context(), opts.DataDir, path, func() {
			fmt.Fprintln(cmd.ErrOrStderr(), "the server has paused its store for the copy; receiving the archive")
		})
	}
	return c, err
}

func newBackupVerifyCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "verify PATH",
		Short: "Check a backup archive: its structure and digest, and with the store's key its MAC",
		Long: `Check a backup archive without a server: that it is whole (every entry, its
summary, its SHA-256 digest), and, given the store's key (--data-dir DIR reads
DIR/key; or $OBLIVKV_KEY), that its MAC matches: that it was made by a holder of
that key. Without a key the MAC is not checked, and the output says so.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := verifyKeys(dataDir)
			if err != nil {
				return err
			}
			c, err := backup.ReadFile(args[0], keys, backup.Visitor{})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: whole\n", args[0])
			printContents(cmd.OutOrStdout(), c)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "data directory whose key file checks the archive's MAC (else $OBLIVKV_KEY, else none)")
	return cmd
}

// verifyKeys returns the keys that check an archive's MAC: the data
// directory's (which must then have one), else $OBLIVKV_KEY's, else none.
func verifyKeys(dataDir string) (*seal.Keys, error) {
	if dataDir == "" && os.Getenv(seal.KeyEnv) == "" {
		return nil, nil
	}
	return setup.LoadKeys(dataDir)
}

func newRestoreCmd() *cobra.Command {
	var o backup.RestoreOptions
	cmd := &cobra.Command{
		Use:   "restore PATH --data-dir DIR [--backend SPEC] [--force]",
		Short: "Put a store back from a backup archive: its storage and its trusted state",
		Long: `Put the store of a backup archive back: every storage address it holds (into
--backend), then the files of its journal (into DIR/journal), then a record of
the restore (the archive's journal position, when, its digest) in the store's
metadata and in DIR/restored, which oblivkv info and INFO show. The store is
then opened once: it replays what its journal held after the archive's
position, and closes with a checkpoint, a new anchor.

The store's key must be in place first: DIR/key (the archive does not hold it),
or $OBLIVKV_KEY. Nothing is written unless the archive is whole and its MAC
matches under that key.

Refused unless --force (which deletes what is there first): a DIR that holds a
journal; storage that holds this store at a journal position newer than the
archive's (both positions are named); storage that holds another store, or
anything else. A restore cut short leaves DIR marked (DIR/restoring): the
server refuses to start on it, and restore runs again over it without --force.

After a restore, storage from before it (a copy of the old storage, however
recent) is refused at start as rolled back: it does not record this restore.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := backup.Restore(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s (%s)\n", args[0], o.DataDir, setup.BackendKind(o.Backend))
			printContents(cmd.OutOrStdout(), r.Contents)
			return nil
		},
	}
	registerLocation(cmd, &o.Backend, &o.DataDir)
	cmd.Flags().BoolVar(&o.Force, "force", false, "restore over a data dir holding a journal, and over storage holding a newer copy of the store, another store or anything else (all deleted first)")
	return cmd
}

// printContents describes an archive.
func printContents(w io.Writer, c backup.Contents) {
	h, s := c.Header, c.Summary
	fmt.Fprintf(w, "protocol:       %s (capacity %d, value size %d, max key size %d, fingerprint %s)\n",
		h.Protocol, h.Capacity, h.ValueSize, h.MaxKeySize, h.Fingerprint)
	fmt.Fprintf(w, "position:       journal position %d (incarnation %d)\n", h.Anchor, h.Incarnation)
	fmt.Fprintf(w, "taken:          %s from %s storage (%s)\n", h.Time.Format("2006-01-02 15:04:05 MST"), h.Backend, onlineWord(h.Online))
	fmt.Fprintf(w, "journal:        %d files, %d bytes\n", s.Files, s.FileBytes)
	fmt.Fprintf(w, "storage:        %d addresses, %d bytes\n", s.Items, s.ItemBytes)
	fmt.Fprintf(w, "sha256:         %s\n", c.DigestHex())
	mac := "matches the store's key"
	if !c.MACChecked {
		mac = "not checked (no key given: --data-dir or $OBLIVKV_KEY)"
	}
	fmt.Fprintf(w, "mac:            %s\n", mac)
}

func onlineWord(online bool) string {
	if online {
		return "online, through the server"
	}
	return "stopped store"
}
