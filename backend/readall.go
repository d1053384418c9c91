package backend

import (
	"context"
	"fmt"
	"slices"
)

// ReadAllBatch is how many addresses ReadAll asks for in one Read unless
// told otherwise.
const ReadAllBatch = 512

// ReadAll reads every stored address of b that begins with prefix once,
// in ascending byte order of the addresses, batch addresses per Read
// (ReadAllBatch when batch <= 0), and hands fn each batch's items in that
// order. Storage sees one Scan and then Reads whose sizes and order follow
// from the set of addresses it holds alone, never from what the addresses
// mean: a copy of the whole store (backup, re-sealing) that shows nothing
// of its keys. It is meant for a store nobody writes meanwhile; an address
// deleted between the Scan and its Read is reported as an error, never
// skipped. fn must not keep the slice it is handed.
func ReadAll(ctx context.Context, b Backend, prefix string, batch int, fn func([]Item) error) error {
	if batch <= 0 {
		batch = ReadAllBatch
	}
	var addrs []string
	if err := b.Scan(ctx, prefix, func(a string) error {
		addrs = append(addrs, a)
		return nil
	}); err != nil {
		return fmt.Errorf("listing storage: %w", err)
	}
	slices.Sort(addrs)
	items := make([]Item, 0, batch)
	for chunk := range slices.Chunk(addrs, batch) {
		vals, err := b.Read(ctx, chunk)
		if err != nil {
			return fmt.Errorf("reading storage: %w", err)
		}
		items = items[:0]
		for i, a := range chunk {
			if vals[i] == nil {
				return fmt.Errorf("reading storage: address %q vanished while it was read (is the store being written?)", a)
			}
			items = append(items, Item{Addr: a, Value: vals[i]})
		}
		if err := fn(items); err != nil {
			return err
		}
	}
	return nil
}
