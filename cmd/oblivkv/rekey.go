package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/rekey"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// rekeyStep is rekey.Options.Step for the rekey command: nil, except in
// tests that stop the process at one of its steps.
var rekeyStep func(point string)

func newRekeyCmd() *cobra.Command {
	var spec, dataDir, newKeyFile string
	var removeOld bool
	cmd := &cobra.Command{
		Use:   "rekey",
		Short: "Re-seal a stopped store, its storage and its journal, under a new master key",
		Long: `Re-seal a stopped store under a new master key: every storage address is
read once and written once, in address order, and the journal is re-sealed
into a new directory that takes the old one's place. Storage sees the same
calls whatever the store holds.

The new key (fresh, or from --new-key-file) is written to DATA_DIR/key.new
before anything is re-sealed. A crash at any point leaves the store
refused by serve until rekey runs again, which finishes the rekey. Once it
is done DATA_DIR/key is the new key and the old one is kept as
DATA_DIR/key.old, until rekey --remove-old-key deletes it (which checks
that the store opens under DATA_DIR/key first).

The store must be stopped (its data dir is locked while it runs). A key
given in $OBLIVKV_KEY is refused: write it to DATA_DIR/key (mode 0600),
unset $OBLIVKV_KEY, and rekey; the new key is then in DATA_DIR/key.

The store is opened and closed once first, as a restart does: that checks
the key, and leaves the journal a checkpoint and storage as the store's
trusted state says. Every protocol is supported, on disk and on Redis.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if removeOld {
				return removeOldKey(cmd, spec, dataDir)
			}
			return runRekey(cmd, spec, dataDir, newKeyFile)
		},
	}
	registerLocation(cmd, &spec, &dataDir)
	fs := cmd.Flags()
	fs.StringVar(&newKeyFile, "new-key-file", "", "take the new master key from this key file (mode 0600) instead of generating one")
	fs.BoolVar(&removeOld, "remove-old-key", false, "delete DATA_DIR/key.old, the key a finished rekey replaced, once the store opens under DATA_DIR/key")
	return cmd
}

func runRekey(cmd *cobra.Command, spec, dataDir, newKeyFile string) error {
	if err := rekeyable(spec); err != nil {
		return err
	}
	var master []byte
	if newKeyFile != "" {
		var err error
		if master, err = seal.ReadKeyFile(newKeyFile); err != nil {
			return err
		}
	}
	res, err := rekey.Run(cmd.Context(), rekey.Options{DataDir: dataDir, NewMaster: master, Step: rekeyStep,
		OpenStore: func(ctx context.Context) (kv.Store, error) { return openExisting(ctx, spec, dataDir) },
		OpenBackend: func(ctx context.Context) (backend.Backend, error) {
			return setup.OpenBackend(ctx, spec, dataDir, false)
		}})
	if err != nil {
		return err
	}
	if res.Resumed {
		fmt.Fprintln(cmd.OutOrStdout(), "finished an unfinished rekey")
	}
	if res.Items > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "re-sealed %d storage addresses and the journal\n", res.Items)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s is the new key; the old one is kept as %s.old\n", setup.KeyFile(dataDir), setup.KeyFile(dataDir))
	return nil
}

// openExisting opens the store in dataDir, which must exist: setup.Open
// would create one.
func openExisting(ctx context.Context, spec, dataDir string) (kv.Store, error) {
	opts := setup.Options{Backend: spec, DataDir: dataDir}
	if _, err := setup.Describe(ctx, opts); err != nil {
		return nil, err
	}
	opened, err := setup.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	return opened.Store, nil
}

// rekeyable refuses what rekey does not re-key: a key from the
// environment, and the mem backend.
func rekeyable(spec string) error {
	if os.Getenv(seal.KeyEnv) != "" {
		return fmt.Errorf("rekey works on the key file: with $%s set it refuses; write the key to DATA_DIR/key (mode 0600), unset $%s and run rekey, then install the new key from DATA_DIR/key", seal.KeyEnv, seal.KeyEnv)
	}
	if spec == "mem" {
		return errors.New("rekey: the mem backend keeps no store between runs")
	}
	return nil
}

// removeOldKey deletes key.old once the store opens under the key.
func removeOldKey(cmd *cobra.Command, spec, dataDir string) error {
	if err := rekeyable(spec); err != nil {
		return err
	}
	if _, err := setup.Describe(cmd.Context(), setup.Options{Backend: spec, DataDir: dataDir}); err != nil {
		return fmt.Errorf("the old key is kept: %w", err)
	}
	if err := rekey.RemoveOldKey(dataDir); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "removed %s.old\n", setup.KeyFile(dataDir))
	return nil
}
