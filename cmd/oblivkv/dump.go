package main

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/records"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/internal/atomicfile"
	"github.com/oblivkv/oblivkv/kv/dump"
)

func newDumpCmd() *cobra.Command {
	var opts setup.Options
	var format, to string
	cmd := &cobra.Command{
		Use:   "dump",
		Short: "Write every key and value of an existing store to a CSV or JSONL file, for oblivkv load",
		Long: `Write every key and value of an existing store to a file that oblivkv load
reads: the way to move a store to another protocol, or to a build whose
storage format differs (dump with the old build, load with the new one).

The store is opened as serve opens it, not served: stop its server first (a
store being served is locked). Every value is read through the store's own
Gets: exactly as many Gets as the store's capacity, one of each stored key and
the rest of names it does not hold, in a random order, so storage sees
ordinary accesses whose number does not depend on how many keys it holds.
Every protocol names its keys from its trusted state. A store of treebeard,
taostore or pathoram holding keys stored by a build that kept no names
cannot be dumped until each of them is written again (docs/protocols.md).

The file holds the values in the clear: it is written with mode 0600, to a
temporary name beside it, synced and renamed into place, so a failed dump
leaves nothing. Records are in no particular order. Formats (by --format,
else by the extension of --to; jsonl on standard output) are those of
oblivkv load:
  csv    "key,value" (RFC 4180 quoting), or "key,value,base64" with both
         fields in standard base64 when either is not text (invalid UTF-8,
         or a carriage return)
  jsonl  {"key": "...", "value": "..."}, with "key_base64" or
         "value_base64" (standard base64) in place of a field that is not
         valid UTF-8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDump(cmd, opts, format, to)
		},
	}
	registerLocation(cmd, &opts.Backend, &opts.DataDir)
	registerOpt(cmd, &opts.OptionArgs, " (only for a store whose build recorded none)")
	cmd.Flags().StringVar(&format, "format", "", "csv or jsonl (default: from the extension of --to; jsonl on standard output)")
	cmd.Flags().StringVar(&to, "to", "-", "file to write, or - for standard output")
	return cmd
}

func runDump(cmd *cobra.Command, opts setup.Options, format, to string) error {
	toStdout := to == "-"
	if format == "" && toStdout {
		format = "jsonl"
	}
	format, err := records.Format(format, to)
	if err != nil {
		return err
	}
	// The store must exist: setup.Open would create an empty one.
	if _, err := setup.Describe(cmd.Context(), opts); err != nil {
		return inUse(err)
	}
	var n int
	var protocol string
	write := func(w io.Writer) (err error) {
		n, protocol, err = dumpTo(cmd, opts, records.NewWriter(w, format))
		return err
	}
	if toStdout {
		err = write(cmd.OutOrStdout())
	} else {
		err = atomicfile.WriteStream(to, 0o600, write)
	}
	if err != nil {
		return err
	}
	report, where := cmd.OutOrStdout(), to
	if toStdout {
		report, where = cmd.ErrOrStderr(), "standard output"
	}
	fmt.Fprintf(report, "dumped %d keys (protocol %s) to %s\n", n, protocol, where)
	return nil
}

// dumpTo opens the store and writes every key and value to w.
func dumpTo(cmd *cobra.Command, opts setup.Options, w *records.Writer) (int, string, error) {
	opened, err := setup.Open(cmd.Context(), opts)
	if err != nil {
		return 0, "", inUse(err)
	}
	protocol := opened.Store.Stats().Protocol
	n, err := dump.All(cmd.Context(), opened.Store, func(key string, val []byte) error {
		return w.Write(records.Record{Key: key, Value: val})
	})
	if err == nil {
		err = w.Flush()
	}
	return n, protocol, errors.Join(err, opened.Close())
}

// inUse adds to err, when it says the data directory is locked, that the
// store is being served and its server must be stopped.
func inUse(err error) error {
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("dump: the store is in use (is it being served?); stop its server, then dump: %w", err)
	}
	return err
}
