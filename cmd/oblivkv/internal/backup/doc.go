// Package backup owns the backup archive of a store (its format, how one
// is written, read and checked) and the two procedures around it: taking
// a copy of a store's trusted state and storage as of one journal
// position, and restoring one into a data directory and a backend.
//
// An archive holds the files of the journal directory as they are (they
// are sealed already) and every storage address with its stored bytes
// (sealed already, fences and versioned values as storage keeps them),
// behind a header that describes the store and its position, and before
// a trailer with the SHA-256 digest of everything else and a MAC under a
// subkey of the master key (seal.Keys.ArchiveMAC). Anybody can check an
// archive is whole; only a holder of the key can make one restore.
//
// Storage is read with backend.ReadAll: every address once, in address
// order, in fixed-size batches, so what storage sees of a backup depends
// on the set of addresses it holds (the store's size), never on keys or
// values. A restore writes storage in the archive's order, the same way.
//
// A restore is visible and deliberate: it records itself in storage's
// metadata record (kv.Restore) and in the data directory
// (setup.WriteRestored), and a start refuses storage and a data directory
// that disagree on it, so storage from before the restore stays refused
// as rolled back, however far the restored journal has moved on.
//
// The package must never write an archive's contents anywhere before the
// whole archive has been checked, never take a file name from an archive
// that leads outside the journal directory, and never copy the key.
package backup
