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
	// OpenStore opens the store under the key in DataDir/key, as a
	// start does. Run opens and closes it once, before anything is
	// re-sealed, so its journal ends in a checkpoint and its storage is
	// as its trusted state says.
	OpenStore func(context.Context) (kv.Store, error)
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
	Items   int  // storage addresses read and written (0: a resumed rekey past that step)
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
	var state []byte
	if p == phaseNone {
		if state, err = start(ctx, d, o); err != nil {
			return res, err
		}
	}
	// Taken once the store is closed: a server started since holds it,
	// and the rekey stops before writing anything.
	release, err := d.lockJournal()
	if err != nil {
		return res, err
	}
	defer release()
	if p == phaseNone {
		if err := d.writeNewKey(o.NewMaster, state, o.Step); err != nil {
			return res, err
		}
		p = phaseStorage
	}
	if p == phaseStorage {
		if res.Items, err = runStorage(ctx, d, o); err != nil {
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

// runStorage re-seals storage, and records that it did.
func runStorage(ctx context.Context, d dir, o Options) (int, error) {
	from, err := readKeys(d.key())
	if err != nil {
		return 0, err
	}
	to, err := readKeys(d.newKey())
	if err != nil {
		return 0, err
	}
	state, err := d.readState(to)
	if err != nil {
		return 0, err
	}
	b, err := o.OpenBackend(ctx)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	n, err := resealStorage(ctx, b, kv.ResealEnv{From: from, To: to, State: state}, o.Step)
	if err != nil {
		return n, err
	}
	if err := backend.Sync(ctx, b); err != nil {
		return n, fmt.Errorf("rekey: syncing storage: %w", err)
	}
	return n, d.writePhase(phaseJournal, o.Step)
}

// start opens and closes the store under the current key, which checks
// the key and leaves the journal a checkpoint and storage as the store's
// trusted state says, and returns what its protocol's Resealer needs of
// that state.
func start(ctx context.Context, d dir, o Options) ([]byte, error) {
	if _, err := os.Stat(d.oldKey()); err == nil {
		return nil, fmt.Errorf("rekey: %s from an earlier rekey is still there; once the store opens under %s, remove it with `oblivkv rekey --remove-old-key --data-dir %s`, then rekey again",
			d.oldKey(), d.key(), d)
	}
	s, err := o.OpenStore(ctx)
	if err != nil {
		return nil, fmt.Errorf("rekey: opening the store under %s: %w", d.key(), err)
	}
	protocol := s.Stats().Protocol
	if err := s.Close(); err != nil {
		return nil, fmt.Errorf("rekey: closing the store: %w", err)
	}
	if p, _ := kv.Lookup(protocol); p.Reseal == nil {
		return nil, fmt.Errorf("rekey: protocol %s is not supported", protocol)
	}
	r, ok := kv.AsResealStater(s)
	if !ok {
		return nil, nil
	}
	return r.ResealState()
}

// resealStorage reads every address of b once, in ascending order, and
// writes each batch back sealed under to, and returns how many addresses
// it re-sealed. It stops at the first item that opens under neither key,
// before that item's batch is written.
func resealStorage(ctx context.Context, b backend.Backend, env kv.ResealEnv, step func(string)) (int, error) {
	r, err := resealerOf(ctx, b, env)
	if err != nil {
		return 0, err
	}
	n := 0
	err = backend.ReadAll(ctx, b, "", 0, func(items []backend.Item) error {
		out, moved := make([]backend.Item, len(items)), []string(nil)
		for i, it := range items {
			var err error
			if out[i], err = resealItem(r, env.From, env.To, it); err != nil {
				return fmt.Errorf("rekey: storage address %q: %w", it.Addr, err)
			}
			if out[i].Addr != it.Addr {
				moved = append(moved, it.Addr)
			}
		}
		if err := writeBatch(ctx, b, out, moved, step); err != nil {
			return err
		}
		n += len(items)
		step("storage batch")
		return nil
	})
	return n, err
}

// writeBatch writes a batch re-sealed, then deletes the addresses its
// items moved from. A crash between the two leaves an item at both
// addresses, the old one under the old key: the next pass moves it again.
func writeBatch(ctx context.Context, b backend.Backend, out []backend.Item, moved []string, step func(string)) error {
	if err := b.Write(ctx, out); err != nil {
		return fmt.Errorf("rekey: writing storage: %w", err)
	}
	if len(moved) == 0 {
		return nil
	}
	step("storage batch moved")
	if err := b.Delete(ctx, moved); err != nil {
		return fmt.Errorf("rekey: deleting the addresses items moved from: %w", err)
	}
	return nil
}

// resealerOf returns the Resealer of the protocol of the store in b,
// whose metadata opens under env.From or, once re-sealed, under env.To.
func resealerOf(ctx context.Context, b backend.Backend, env kv.ResealEnv) (kv.Resealer, error) {
	cfg, ok, err := kv.Describe(ctx, b, env.From)
	if errors.Is(err, kv.ErrWrongKey) {
		cfg, ok, err = kv.Describe(ctx, b, env.To)
	}
	if err != nil || !ok {
		return nil, errors.Join(errors.New("rekey: the store's metadata opens under neither the old nor the new key"), err)
	}
	p, _ := kv.Lookup(cfg.Protocol)
	if p.Reseal == nil {
		return nil, fmt.Errorf("rekey: protocol %s is not supported", cfg.Protocol)
	}
	env.ValueSize = cfg.ValueSize
	r, err := p.Reseal(env)
	if err != nil {
		return nil, fmt.Errorf("rekey: %w", err)
	}
	return r, nil
}

// resealItem returns it sealed under to: the metadata record
// (kv.ResealMeta), a fence token as it is, a protocol's item by its
// Resealer (perhaps at another address), and anything else (durable's
// anchor) bound to its address.
func resealItem(r kv.Resealer, from, to *seal.Keys, it backend.Item) (backend.Item, error) {
	switch {
	case it.Addr == kv.MetaAddr:
		v, err := kv.ResealMeta(from, to, it.Value)
		return backend.Item{Addr: it.Addr, Value: v}, err
	case strings.HasPrefix(it.Addr, backend.FenceKeyPrefix):
		return it, nil
	}
	out, ok, err := r.Reseal(it.Addr, it.Value)
	if !ok {
		v, err := seal.Reseal(from, to, nil, []byte(it.Addr), it.Value)
		return backend.Item{Addr: it.Addr, Value: v}, err
	}
	return out, err
}

// resealJournal re-seals the journal into journal.new, afresh: a
// journal.new a crash left may be partial.
func resealJournal(ctx context.Context, d dir, step func(string)) error {
	from, err := readKeys(d.key())
	if err != nil {
		return err
	}
	to, err := readKeys(d.newKey())
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
