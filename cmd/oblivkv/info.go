package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/options"
)

func newInfoCmd() *cobra.Command {
	var opts setup.Options
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Print what an existing store records about itself, without serving it",
		Long: `Print the protocol, capacity, value size, maximum key size and protocol
options an existing store was created with (what serve and load reuse when not
given them), the fingerprint of its protocol and options (as the server's INFO
shows it: equal fingerprints, equal configurations), and the bytes its data directory takes. It reads the key file to
open the store's sealed metadata record and writes nothing: the disk backend
is opened read-only. A store being served cannot be read (its directory is
locked).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := setup.Describe(cmd.Context(), opts)
			if err != nil {
				return err
			}
			printInfo(cmd.OutOrStdout(), opts, d)
			return nil
		},
	}
	registerLocation(cmd, &opts.Backend, &opts.DataDir)
	return cmd
}

func printInfo(w io.Writer, opts setup.Options, d setup.Description) {
	shown, fingerprint := "none (the protocol's defaults)", kv.OptionsFingerprint(d.Protocol, d.Settings)
	switch {
	case d.Settings == nil:
		shown = "not recorded (created by an older build: give them with --opt at every start)"
		fingerprint = "none (options not recorded)"
	case len(d.Settings) > 0:
		shown = strings.Join(options.Args(d.Settings), " ")
	}
	fmt.Fprintf(w, "data_dir:      %s\n", opts.DataDir)
	fmt.Fprintf(w, "backend:       %s\n", setup.BackendKind(opts.Backend))
	fmt.Fprintf(w, "protocol:      %s\n", d.Protocol)
	fmt.Fprintf(w, "capacity:      %d\n", d.Capacity)
	fmt.Fprintf(w, "value_size:    %d\n", d.ValueSize)
	fmt.Fprintf(w, "max_key_size:  %d\n", d.MaxKeySize)
	fmt.Fprintf(w, "options:       %s\n", shown)
	fmt.Fprintf(w, "fingerprint:   %s\n", fingerprint)
	fmt.Fprintf(w, "restored:      %s\n", restoredText(d.Restored))
	fmt.Fprintf(w, "store_bytes:   %d\n", d.StoreBytes)
	fmt.Fprintf(w, "journal_bytes: %d\n", d.JournalBytes)
}

// restoredText describes the backup a store was restored from.
func restoredText(r *kv.Restore) string {
	if r == nil {
		return "no"
	}
	return fmt.Sprintf("from a backup at journal position %d, on %s (archive sha256 %s)", r.At, r.Time.Format("2006-01-02 15:04:05 MST"), r.Digest)
}
