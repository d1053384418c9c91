package rekey

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/oblivkv/oblivkv/internal/atomicfile"
	"github.com/oblivkv/oblivkv/internal/durable/journal"
	"github.com/oblivkv/oblivkv/seal"
)

// The files of a data directory a rekey reads and writes.
const (
	keyName     = "key"
	journalName = "journal"
	markerName  = "rekey"
	stateName   = "rekey.state"
	newSuffix   = ".new"
	oldSuffix   = ".old"
)

// markerHeader begins the marker's one line; the phase follows it.
const markerHeader = "oblivkv-rekey-v1 "

// phase is the step a rekey is at, as its marker records it.
type phase string

const (
	phaseNone    phase = "" // no marker: no rekey under way
	phaseStorage phase = "storage"
	phaseJournal phase = "journal"
	phaseSwap    phase = "swap"
	phaseCommit  phase = "commit"
)

// ErrUnfinished reports a store whose rekey a crash cut short: it opens
// under neither key until `oblivkv rekey` runs again and finishes it.
var ErrUnfinished = errors.New("a rekey of this store is unfinished")

// dir is a data directory.
type dir string

func (d dir) path(name string) string   { return filepath.Join(string(d), name) }
func (d dir) key() string               { return d.path(keyName) }
func (d dir) newKey() string            { return d.path(keyName + newSuffix) }
func (d dir) oldKey() string            { return d.path(keyName + oldSuffix) }
func (d dir) marker() string            { return d.path(markerName) }
func (d dir) state() string             { return d.path(stateName) }
func (d dir) journal(sfx string) string { return d.path(journalName + sfx) }

// Unfinished returns an error wrapping ErrUnfinished, which says how to
// finish it, when a rekey of the store in dataDir is under way.
func Unfinished(dataDir string) error {
	d := dir(dataDir)
	if _, err := os.Stat(d.marker()); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	return fmt.Errorf("%w (%s): run `oblivkv rekey --data-dir %s` again to finish it", ErrUnfinished, d.marker(), dataDir)
}

// RemoveOldKey deletes the key a finished rekey replaced (key.old). It
// refuses while a rekey is unfinished.
func RemoveOldKey(dataDir string) error {
	d := dir(dataDir)
	if err := Unfinished(dataDir); err != nil {
		return err
	}
	if err := os.Remove(d.oldKey()); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rekey: there is no old key in %s", d)
	} else if err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	return syncDir(d)
}

// lock takes the data directory's rekey lock (DATA_DIR/LOCK): one rekey
// at a time.
func (d dir) lock() (func(), error) {
	own, err := journal.Lock(string(d))
	if err != nil {
		return nil, inUse(d, "another rekey runs on", err)
	}
	return func() { own.Close() }, nil
}

// lockJournal takes the journal's lock, which every process serving the
// store holds, where there is a journal.
func (d dir) lockJournal() (func(), error) {
	if _, err := os.Stat(d.journal("")); err != nil {
		return func() {}, nil
	}
	j, err := journal.Lock(d.journal(""))
	if err != nil {
		return nil, inUse(d, "a server holds", err)
	}
	return func() { j.Close() }, nil
}

// inUse names who holds a lock lock could not take, or else passes err
// on.
func inUse(d dir, who string, err error) error {
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("rekey: %s %s; stop it first", who, d)
	}
	return fmt.Errorf("rekey: %w", err)
}

// readPhase returns the phase the marker records (phaseNone: none).
func (d dir) readPhase() (phase, error) {
	b, err := os.ReadFile(d.marker())
	if errors.Is(err, fs.ErrNotExist) {
		return phaseNone, nil
	}
	if err != nil {
		return phaseNone, fmt.Errorf("rekey: %w", err)
	}
	p := phase(strings.TrimSuffix(strings.TrimPrefix(string(b), markerHeader), "\n"))
	switch p {
	case phaseStorage, phaseJournal, phaseSwap, phaseCommit:
		return p, nil
	}
	return phaseNone, fmt.Errorf("rekey: %s does not name a step of a rekey", d.marker())
}

// writePhase records p in the marker, durably.
func (d dir) writePhase(p phase, step func(string)) error {
	if err := atomicfile.Write(d.marker(), []byte(markerHeader+string(p)+"\n"), 0o600); err != nil {
		return fmt.Errorf("rekey: writing %s: %w", d.marker(), err)
	}
	step("marker " + string(p))
	return nil
}

// writeNewKey writes master (nil: a fresh key) to key.new, replacing one
// a crash before the marker left, state sealed under it to rekey.state,
// then the marker: from here on the rekey resumes with that key and that
// state.
func (d dir) writeNewKey(master, state []byte, step func(string)) error {
	if master == nil {
		var err error
		if master, err = seal.GenerateMaster(); err != nil {
			return err
		}
	}
	if err := os.Remove(d.newKey()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rekey: %w", err)
	}
	if err := seal.WriteKeyFile(d.newKey(), master); err != nil {
		return err
	}
	if err := syncDir(d); err != nil {
		return err
	}
	step("new key written")
	to, err := seal.NewKeys(master)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(d.state(), to.Seal(nil, stateAD, state), 0o600); err != nil {
		return fmt.Errorf("rekey: writing %s: %w", d.state(), err)
	}
	return d.writePhase(phaseStorage, step)
}

// stateAD binds rekey.state.
var stateAD = []byte("oblivkv rekey state")

// readState returns what rekey.state holds, sealed under to: the
// protocol's part of the store's trusted state (kv.ResealStater).
func (d dir) readState(to *seal.Keys) ([]byte, error) {
	b, err := os.ReadFile(d.state())
	if err != nil {
		return nil, fmt.Errorf("rekey: %w", err)
	}
	state, err := to.Open(nil, stateAD, b)
	if err != nil {
		return nil, fmt.Errorf("rekey: %s: %w", d.state(), err)
	}
	return state, nil
}

// readKeys reads the key file at path and derives its keys.
func readKeys(path string) (*seal.Keys, error) {
	master, err := seal.ReadKeyFile(path)
	if err != nil {
		return nil, err
	}
	return seal.NewKeys(master)
}

// swapJournal puts journal.new in journal's place: journal becomes
// journal.old (unless a crash came after that), journal.new becomes
// journal (unless a crash came after that), and journal.old goes.
func (d dir) swapJournal(step func(string)) error {
	if _, err := os.Stat(d.journal(newSuffix)); err == nil {
		if _, err := os.Stat(d.journal("")); err == nil {
			if err := d.rename(d.journal(""), d.journal(oldSuffix), step); err != nil {
				return err
			}
		}
		if err := d.rename(d.journal(newSuffix), d.journal(""), step); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(d.journal(oldSuffix)); err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	return syncDir(d)
}

// commitKeys makes key.new the key: key becomes key.old (unless a crash
// came after that), key.new becomes key (likewise), and the marker goes.
func (d dir) commitKeys(step func(string)) error {
	if _, err := os.Stat(d.newKey()); err == nil {
		if _, err := os.Stat(d.oldKey()); errors.Is(err, fs.ErrNotExist) {
			if err := d.rename(d.key(), d.oldKey(), step); err != nil {
				return err
			}
		}
		if err := d.rename(d.newKey(), d.key(), step); err != nil {
			return err
		}
	}
	if err := os.Remove(d.state()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rekey: %w", err)
	}
	if err := os.Remove(d.marker()); err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	return syncDir(d)
}

// rename renames from to to, durably.
func (d dir) rename(from, to string, step func(string)) error {
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	if err := syncDir(d); err != nil {
		return err
	}
	step("renamed " + filepath.Base(from))
	return nil
}

func syncDir(d dir) error {
	if err := atomicfile.SyncDir(string(d)); err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	return nil
}
