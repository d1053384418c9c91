package slots

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// load reads the index into memory and rebuilds the free slots. After an
// unclean close it first checks every entry against its slot (recover).
// Every entry's base is free afterwards: its current slot is durable.
func (b *Backend) load() error {
	cs, err := openClasses(b.fs, b.dir, b.readOnly)
	if err != nil {
		return err
	}
	b.cs = cs
	clean, err := b.takeCleanMarker()
	if err != nil {
		return err
	}
	repairs := b.db.NewBatch()
	defer repairs.Close()
	if err := b.readIndex(clean, repairs); err != nil {
		return err
	}
	if !clean && !b.readOnly {
		if err := b.commitRepairs(repairs); err != nil {
			return err
		}
	}
	used := map[uint16][]uint32{}
	b.idx.each(func(_ string, e entry) {
		if at := e.cur.at; at.valid() {
			used[at.class] = append(used[at.class], at.slot)
		}
	})
	b.cs.rebuild(used)
	return nil
}

// readIndex loads every entry; unless clean, it checks each and records
// the repairs in repairs.
func (b *Backend) readIndex(clean bool, repairs *pebble.Batch) error {
	it, err := b.db.NewIter(nil)
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		addr := string(it.Key())
		e, err := decodeEntry(it.Value(), b.cs.find)
		if err != nil {
			it.Close()
			return err
		}
		if !clean {
			if err := b.recoverEntry(addr, &e, repairs); err != nil {
				it.Close()
				return err
			}
		}
		if e.cur.exists() {
			e.base = value{}
			b.idx.put(addr, e)
		}
	}
	return it.Close()
}

// recoverEntry checks e after an unclean close: a current slot the crash
// tore gives way to the base (the address's last synced value), and an
// address with neither loses its entry (it was written only since the
// last sync, which a caller that defers syncs redoes from its journal).
func (b *Backend) recoverEntry(addr string, e *entry, repairs *pebble.Batch) error {
	if e.cur.inline != nil {
		return nil
	}
	ok, err := b.intact(addr, e.cur)
	if err != nil || ok {
		return err
	}
	if ok, err = b.intact(addr, e.base); err != nil {
		return err
	}
	if ok {
		*e = entry{cur: e.base}
		return repairs.Set([]byte(addr), e.encode(b.cs), nil)
	}

	*e = entry{}
	return repairs.Delete([]byte(addr), nil)
}

// intact reports whether v is addr's value: an inline one is, a slot is
// if it holds it; a slot past the end of its file (never synced) does
// not.
func (b *Backend) intact(addr string, v value) (bool, error) {
	if !v.at.valid() {
		return v.inline != nil, nil
	}
	_, ok, err := b.cs.read(v.at, addr)
	if err != nil && isShortRead(err) {
		return false, nil
	}
	return ok, err
}

// commitRepairs makes the checked slots and the repaired index durable
// before any of the slots it frees can be reused.
func (b *Backend) commitRepairs(repairs *pebble.Batch) error {
	if err := b.cs.syncAll(); err != nil {
		return err
	}
	return repairs.Commit(pebble.Sync)
}

// takeCleanMarker reports whether the last close was clean, and removes
// the record of it (durably) so a crash from now on is seen as one.
func (b *Backend) takeCleanMarker() (bool, error) {
	name := filepath.Join(b.dir, cleanMarker)
	if _, err := b.fs.Stat(name); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil || b.readOnly {
		return err == nil, err
	}
	if err := b.fs.Remove(name); err != nil {
		return false, err
	}
	return true, syncDir(b.fs, b.dir)
}

// markClean records a clean close of the store in dir.
func markClean(fs vfs.FS, dir string) error {
	f, err := fs.Create(filepath.Join(dir, cleanMarker))
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(fs, dir)
}
