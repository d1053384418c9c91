package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

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

Formats (by --format, else by the file's extension):
  csv    one "key,value" record per line (RFC 4180 quoting)
  jsonl  one {"key": "...", "value": "..."} object per line`,
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
	if format == "" {
		format = strings.TrimPrefix(filepath.Ext(path), ".")
	}
	pairs, err := readPairs(path, format)
	if err != nil {
		return err
	}
	items := func(yield func(string, []byte) bool) {
		for _, p := range pairs {
			if !yield(p.key, p.val) {
				return
			}
		}
	}
	opened, err := setup.Open(cmd.Context(), opts)
	if err != nil {
		return err
	}
	if err := checkPairs(pairs, opened.Store.Stats()); err != nil {
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
	fmt.Fprintf(cmd.OutOrStdout(), "loaded %d records; the store holds %d keys\n", len(pairs), n)
	return nil
}

type pair struct {
	key string
	val []byte
}

func checkPairs(pairs []pair, st kv.Stats) error {
	for i, p := range pairs {
		switch {
		case len(p.key) > st.MaxKeySize:
			return fmt.Errorf("record %d: %w (%d bytes, limit %d)", i+1, kv.ErrKeyTooLarge, len(p.key), st.MaxKeySize)
		case len(p.val) > st.ValueSize:
			return fmt.Errorf("record %d: %w (%d bytes, limit %d)", i+1, kv.ErrValueTooLarge, len(p.val), st.ValueSize)
		}
	}
	return nil
}

func readPairs(path, format string) ([]pair, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	switch format {
	case "csv":
		return readCSV(f)
	case "jsonl", "ndjson":
		return readJSONL(f)
	}
	return nil, fmt.Errorf("unknown format %q: use --format csv or --format jsonl", format)
}

func readCSV(r io.Reader) ([]pair, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 2
	var out []pair
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
		out = append(out, pair{key: rec[0], val: []byte(rec[1])})
	}
}

func readJSONL(r io.Reader) ([]pair, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 128<<20)
	var out []pair
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var rec struct {
			Key   *string `json:"key"`
			Value *string `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("jsonl line %d: %w", line, err)
		}
		if rec.Key == nil || rec.Value == nil {
			return nil, fmt.Errorf("jsonl line %d: needs both \"key\" and \"value\"", line)
		}
		out = append(out, pair{key: *rec.Key, val: []byte(*rec.Value)})
	}
	return out, sc.Err()
}
