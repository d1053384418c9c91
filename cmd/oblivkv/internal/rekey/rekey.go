package rekey

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/oblivkv/oblivkv/backend"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/seal"
)

// Options say which store to re-key, and how.
type Options struct {
	// DataDir holds the key file and the journal (and, for the disk
	// backend, the store).
	DataDir string
	// OpenBackend opens the store's storage. Run calls it once it holds
	// the data directory's locks, and closes what it returns.
	OpenBackend func(context.Context) (backend.Backend, error)
	// NewMaster is the new master key; nil: a fresh one
	// (seal.GenerateMaster). A resumed rekey keeps the key it started
	// with and ignores this.
	NewMaster []byte
	// Step, if set, is called after each step a crash may follow, with
	// its name: a test's way to stop the process there. nil in
	// production.
	Step func(point string)
}

// Result says what a Run did.
type Result struct {
	Resumed bool // an unfinished rekey was found and finished
	Items   int  // storage addresses read and written
}

// Run re-keys the store in o.DataDir, or finishes a rekey a crash cut
// short.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Step == nil {
		o.Step = func(string) {}
	}
	d := dir(o.DataDir)
	unlock, err := d.lock()
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	p, err := d.readPhase()
	if err != nil {
		return Result{}, err
	}
	res := Result{Resumed: p != phaseNone}
	if p == phaseNone || p == phaseStorage {
		if res.Items, err = runStorage(ctx, d, o, p); err != nil {
			return res, err
		}
		p = phaseJournal
	}
	return res, finish(ctx, d, o.Step, p)
}

// finish runs the steps after storage's, from p on.
func finish(ctx context.Context, d dir, step func(string), p phase) error {
	if p == phaseJournal {
		if err := resealJournal(ctx, d, step); err != nil {
			return err
		}
		p = phaseSwap
	}
	if p == phaseSwap {
		if err := d.swapJournal(step); err != nil {
			return err
		}
		if err := d.writePhase(phaseCommit, step); err != nil {
			return err
		}
	}
	return d.commitKeys(step)
}

// runStorage starts a rekey (phase none) or resumes one at its storage
// step, and re-seals storage.
func runStorage(ctx context.Context, d dir, o Options, p phase) (int, error) {
	b, err := o.OpenBackend(ctx)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	from, err := d.keys(d.key())
	if err != nil {
		return 0, err
	}
	if p == phaseNone {
		if err := start(ctx, d, b, from, o); err != nil {
			return 0, err
		}
	}
	to, err := d.keys(d.newKey())
	if err != nil {
		return 0, err
	}
	n, err := resealStorage(ctx, b, from, to, o.Step)
	if err != nil {
		return n, err
	}
	if err := backend.Sync(ctx, b); err != nil {
		return n, fmt.Errorf("rekey: syncing storage: %w", err)
	}
	return n, d.writePhase(phaseJournal, o.Step)
}

// start checks the store opens under the current key and has a protocol
// rekey supports, then records the new key and the marker.
func start(ctx context.Context, d dir, b backend.Backend, from *seal.Keys, o Options) error {
	if _, err := os.Stat(d.oldKey()); err == nil {
		return fmt.Errorf("rekey: %s from an earlier rekey is still there; once the store opens under %s, remove it with `oblivkv rekey --remove-old-key --data-dir %s`, then rekey again",
			d.oldKey(), d.key(), d)
	}
	cfg, ok, err := kv.Describe(ctx, b, from)
	switch {
	case errors.Is(err, kv.ErrWrongKey):
		return fmt.Errorf("rekey: %w (key file %s)", err, d.key())
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("rekey: the storage of %s holds no store", d)
	}
	if p, _ := kv.Lookup(cfg.Protocol); p.Reseal == nil {
		return fmt.Errorf("rekey: protocol %s binds its storage to the proxy's trusted state, which rekey cannot re-seal from storage; it is not supported", cfg.Protocol)
	}
	return d.writeNewKey(o.NewMaster, o.Step)
}

// resealStorage reads every address of b once, in ascending order, and
// writes each batch back sealed under to, and returns how many addresses
// it re-sealed. It stops at the first item that opens under neither key,
// before that item's batch is written.
func resealStorage(ctx context.Context, b backend.Backend, from, to *seal.Keys, step func(string)) (int, error) {
	r, err := resealerOf(ctx, b, from, to)
	if err != nil {
		return 0, err
	}
	n := 0
	err = backend.ReadAll(ctx, b, "", 0, func(items []backend.Item) error {
		out := make([]backend.Item, len(items))
		for i, it := range items {
			v, err := resealItem(r, from, to, it)
			if err != nil {
				return fmt.Errorf("rekey: storage address %q: %w", it.Addr, err)
			}
			out[i] = backend.Item{Addr: it.Addr, Value: v}
		}
		if err := b.Write(ctx, out); err != nil {
			return fmt.Errorf("rekey: writing storage: %w", err)
		}
		n += len(items)
		step("storage batch")
		return nil
	})
	return n, err
}

// resealerOf returns the Resealer of the protocol of the store in b,
// whose metadata opens under from or, once re-sealed, under to.
func resealerOf(ctx context.Context, b backend.Backend, from, to *seal.Keys) (kv.Resealer, error) {
	cfg, ok, err := kv.Describe(ctx, b, from)
	if errors.Is(err, kv.ErrWrongKey) {
		cfg, ok, err = kv.Describe(ctx, b, to)
	}
	if err != nil || !ok {
		return nil, errors.Join(errors.New("rekey: the store's metadata opens under neither the old nor the new key"), err)
	}
	p, _ := kv.Lookup(cfg.Protocol)
	if p.Reseal == nil {
		return nil, fmt.Errorf("rekey: protocol %s cannot be re-keyed", cfg.Protocol)
	}
	return p.Reseal(kv.ResealEnv{From: from, To: to, ValueSize: cfg.ValueSize}), nil
}

// resealItem returns it's value sealed under to: the metadata record
// (kv.ResealMeta), a fence token as it is, a protocol's item by its
// Resealer, and anything else (durable's anchor) bound to its address.
func resealItem(r kv.Resealer, from, to *seal.Keys, it backend.Item) ([]byte, error) {
	switch {
	case it.Addr == kv.MetaAddr:
		return kv.ResealMeta(from, to, it.Value)
	case strings.HasPrefix(it.Addr, backend.FenceKeyPrefix):
		return it.Value, nil
	}
	v, ok, err := r.Reseal(it.Addr, it.Value)
	if !ok {
		v, err = seal.Reseal(from, to, nil, []byte(it.Addr), it.Value)
	}
	return v, err
}

// resealJournal re-seals the journal into journal.new, afresh: a
// journal.new a crash left may be partial.
func resealJournal(ctx context.Context, d dir, step func(string)) error {
	from, err := d.keys(d.key())
	if err != nil {
		return err
	}
	to, err := d.keys(d.newKey())
	if err != nil {
		return err
	}
	if err := os.RemoveAll(d.journal(newSuffix)); err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	if _, err := os.Stat(d.journal("")); err == nil {
		if err := journal.Reseal(ctx, d.journal(""), d.journal(newSuffix), from, to); err != nil {
			return fmt.Errorf("rekey: re-sealing the journal: %w", err)
		}
		step("journal re-sealed")
	}
	return d.writePhase(phaseSwap, step)
}
