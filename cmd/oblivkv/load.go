package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/records"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/kv"
)

func newLoadCmd() *cobra.Command {
	var sf storeFlags
	var format string
	cmd := &cobra.Command{
		Use:   "load FILE",
		Short: "Bulk-load key-value pairs from a CSV or JSONL file into a new store",
		Long: `Bulk-load key-value pairs into a new, empty store.

The protocol builds its initial layout in memory and writes it in large
batches (never one oblivious access per item). The file is read and checked
in full before anything is written, so a malformed line or an oversized value
loads nothing.

Formats (by --format, else by the file's extension), as oblivkv dump writes
them:
  csv    one "key,value" record per line (RFC 4180 quoting); a record whose
         key or value is not text (invalid UTF-8, or a carriage return) is
         "key,value,base64", both fields in standard base64
  jsonl  one {"key": "...", "value": "..."} object per line; a key or value
         that is not valid UTF-8 is in "key_base64" or "value_base64"
         instead, in standard base64

To move a store to another protocol or build: oblivkv dump it to a file, then
load the file into a new store (see docs/OPERATIONS.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return load(cmd, sf.options(cmd), args[0], format)
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&format, "format", "", "csv or jsonl (default: from the file extension)")
	return cmd
}

func load(cmd *cobra.Command, opts setup.Options, path, format string) error {
	format, err := records.Format(format, path)
	if err != nil {
		return err
	}
	recs, err := readRecords(path, format)
	if err != nil {
		return err
	}
	items := func(yield func(string, []byte) bool) {
		for _, r := range recs {
			if !yield(r.Key, r.Value) {
				return
			}
		}
	}
	opened, err := setup.Open(cmd.Context(), opts)
	if err != nil {
		return err
	}
	if err := checkRecords(recs, opened.Store.Stats()); err != nil {
		return errors.Join(err, opened.Close())
	}
	loader, ok := kv.AsLoader(opened.Store)
	if !ok {
		return errors.Join(fmt.Errorf("protocol %s has no bulk loader", opened.Store.Stats().Protocol), opened.Close())
	}
	n, err := loader.Load(cmd.Context(), items)
	if err = errors.Join(err, opened.Close()); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "loaded %d records; the store holds %d keys\n", len(recs), n)
	return nil
}

func checkRecords(recs []records.Record, st kv.Stats) error {
	for i, r := range recs {
		switch {
		case len(r.Key) > st.MaxKeySize:
			return fmt.Errorf("record %d: %w (%d bytes, limit %d)", i+1, kv.ErrKeyTooLarge, len(r.Key), st.MaxKeySize)
		case len(r.Value) > st.ValueSize:
			return fmt.Errorf("record %d: %w (%d bytes, limit %d)", i+1, kv.ErrValueTooLarge, len(r.Value), st.ValueSize)
		}
	}
	return nil
}

func readRecords(path, format string) ([]records.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return records.Read(f, format)
}
