// Package rekey re-seals a stopped store, its storage and its journal,
// under a new master key (`oblivkv rekey`), so that a crash at any point
// leaves a state the next run finishes, and the store opens under exactly
// one key once it has.
//
// # What the master key seals
//
// seal.NewKeys derives two subkeys: an AES-GCM sealing key and a PRF key.
//
//   - Storage: the metadata record (kv.MetaAddr) and durable's anchor
//     (durable.AnchorAddr), bound to their addresses; each protocol's
//     items: treebeard's Ring ORAM bucket metadata (bound to its address)
//     and slots (bound to the bucket's address, the slot index and the
//     slot version the metadata holds); TaoStore's buckets (tree.Codec,
//     bound to address, slot and the version stored in front of the value
//     by WriteVersioned); Waffle's objects and the encrypted baseline's
//     values (bound to their addresses); Path ORAM's buckets (tree.Codec,
//     bound to a version the proxy keeps in its trusted state); Cloak's
//     elements (bound to address and the batch id its trusted position map
//     keeps); ObliviStore's slots (bound to address and its level's nonce,
//     also trusted state). Fence tokens (backend.FenceKeyPrefix) and the
//     plain baseline's values are not sealed.
//   - The journal (DATA_DIR/journal): the ident file, every record (bound
//     to its LSN and machine), and its checkpoint store: sealedstate's
//     chunks (bound to their addresses), the floor and the incarnation.
//   - The PRF: tree block IDs are PRF(key) (pathoram, taostore,
//     treebeard) and reach storage only inside sealed blocks, and the
//     journal; the encrypted baseline's addresses are
//     PRF(key); Waffle's are PRF(key, timestamp). No store keeps the
//     logical keys of the tree protocols or the encrypted baseline, so an
//     identifier derived from them cannot be derived again under a new
//     key.
//
// So a rekey changes the sealing key of everything, and moves Waffle's
// objects to their addresses under the new key's PRF (seal.CurrentPRF;
// Waffle's trusted state holds each object's key and timestamp). For the
// identifiers it cannot derive again it keeps the PRF key of the key the
// store was created under (seal.Keys.PRF): kv.ResealMeta records it in the
// metadata record (sealed under the new key), and kv.Open uses it. A
// leaked old key then opens nothing that was re-sealed and names no
// Waffle address; it still lets its holder compute the kept PRF, which
// links the encrypted baseline's addresses to guessed keys, as it did
// before the rekey. The tree protocols' identifiers are visible to no one
// without the new key.
//
// Each protocol registers a kv.Resealer (kv.Protocol.Reseal) that
// re-seals its items from what storage holds (its address, a version
// stored beside it, a bucket's metadata at a lower address) and, for
// Path ORAM, Cloak and ObliviStore, whose items are bound to trusted
// state, and Waffle, whose addresses move, the part of that state it
// needs (kv.ResealStater: every bucket's version, every address's batch
// id, every level's nonces, every object's key and timestamp). Addresses no
// Resealer claims are sealed bound to themselves (the metadata record and
// the anchor). ObliviStore's storage also holds the slots of levels a
// shuffle emptied, which nothing reads again and no state opens: its
// Resealer writes a dummy of the same size under the new key in their
// place.
//
// # The steps, and what a crash leaves
//
// A marker file, DATA_DIR/rekey, names the step under way; its presence
// is what makes a start refuse the store (Unfinished).
//
//  1. The store is opened and closed under the current key, as a restart
//     does: that checks the key, ends the journal in a checkpoint and
//     leaves storage as the trusted state says. The new key is written to
//     DATA_DIR/key.new (0600, synced), the protocol's ResealState to
//     DATA_DIR/rekey.state (sealed under the new key), then the marker
//     (storage).
//  2. Storage: backend.ReadAll reads every address once, in ascending
//     order, 512 a Read; each batch is re-sealed and written back as one
//     Write; storage is synced; the marker says journal. Every item opens
//     under exactly one of the two keys (AES-GCM tells which): a rerun
//     re-seals what opens under the old key and seals afresh what opens
//     under the new one, so storage sees the same calls again.
//  3. The journal is re-sealed into DATA_DIR/journal.new (synced), and
//     the marker says swap. A rerun before that deletes journal.new and
//     starts again.
//  4. Swap: journal becomes journal.old, journal.new becomes journal, and
//     journal.old is deleted. Which of these renames happened shows from
//     which directories exist.
//  5. Commit: the marker says commit; key becomes key.old and key.new
//     becomes key; rekey.state and the marker are deleted. key.old stays
//     until RemoveOldKey.
//
// A rekey never rolls back: every step after the first resumes.
//
// The package must never print or log key material, never write an item
// that failed to authenticate, and never run beside a process that holds
// the store's journal.
package rekey
