package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/seal"
)

// Reseal writes to dst, a directory that must not exist, the journal in
// src sealed under to instead of from (`oblivkv rekey`): its identity,
// every record of every segment with its LSN and machine (a segment's
// stale or torn tail left out, as Open passes over it, and free files
// not copied, so dst holds nothing sealed under from), and every item of
// its checkpoint store, each bound to the same associated data as
// before. Everything written is synced before it returns. A journal of
// an earlier build's format is refused: a start of this build converts
// it.
func Reseal(ctx context.Context, src, dst string, from, to *seal.Keys) error {
	if err := checkIdent(src, from); err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := writeFileSync(filepath.Join(dst, identFile), to.Seal(nil, identAD, identAD)); err != nil {
		return err
	}
	if err := resealSegments(src, dst, from, to); err != nil {
		return err
	}
	if err := resealCheckpoints(ctx, src, dst, from, to); err != nil {
		return err
	}
	return syncDir(dst)
}

// resealSegments writes each segment of src to dst, its records sealed
// under to.
func resealSegments(src, dst string, from, to *seal.Keys) error {
	segs, err := listSegments(src)
	if err != nil {
		return err
	}
	for i, s := range segs {
		if s.legacy {
			return errors.New("journal: it holds an earlier build's log; start the store once with this build, then run rekey")
		}
		recs, err := readSegment(s, from, nextFirst(segs, i))
		if err != nil {
			return err
		}
		var out []byte
		for _, r := range recs {
			out = appendRecord(out, to, r.LSN, r.Machine, r.Data)
		}
		if err := writeFileSync(filepath.Join(dst, filepath.Base(s.path)), out); err != nil {
			return err
		}
	}
	return nil
}

// resealCheckpoints copies src's checkpoint store to dst's, every item
// sealed under to.
func resealCheckpoints(ctx context.Context, src, dst string, from, to *seal.Keys) error {
	in, err := disk.OpenWith(filepath.Join(src, "checkpoints"), checkpointStore)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer in.Close()
	out, err := disk.OpenWith(filepath.Join(dst, "checkpoints"), checkpointStore)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	err = backend.ReadAll(ctx, in, "", 0, func(items []backend.Item) error {
		resealed := make([]backend.Item, len(items))
		for i, it := range items {
			v, err := seal.Reseal(from, to, nil, checkpointAD(it.Addr), it.Value)
			if err != nil {
				return fmt.Errorf("journal: checkpoint store item %q: %w", it.Addr, err)
			}
			resealed[i] = backend.Item{Addr: it.Addr, Value: v}
		}
		return out.Write(ctx, resealed)
	})
	return errors.Join(err, out.Close())
}

// checkpointAD is the associated data of the item at addr of the
// checkpoint store: the floor's and the incarnation's own, and for the
// rest (sealedstate's checkpoints) the address.
func checkpointAD(addr string) []byte {
	switch addr {
	case floorAddr:
		return floorAD
	case incarnationAddr:
		return incarnationAD
	}
	return []byte(addr)
}
