// Package tree holds the code every tree-based ORAM protocol shares: the
// geometry of a complete binary tree of buckets (paths, levels, common
// ancestors, reverse-lexicographic eviction order), block identifiers, the
// sealed bucket format (Codec), bucket addresses on storage (Layout), the
// batched reads and writes of sets of buckets, the greedy flush that
// places blocks as deep as possible on a path (Flusher), and what their
// audits share of storage's view (view.go: leaf bins, the hot key's
// walk).
//
// Path ORAM (protocol/pathoram) and TaORAM (protocol/taostore) use buckets
// of Z=4 slots on one tree, stored whole at Layout addresses. Ring ORAM
// (protocol/ringoram, Treebeard's trees) uses buckets of Z+S slots, each
// slot at its own address: it writes whole buckets with its blocks in
// chosen slots (Codec.EncodeSlots) and reads single slots
// (Codec.DecodeSlot).
//
// The package owns how a bucket looks on storage: a bucket is a fixed
// number of fixed-size slots, each sealed separately with AES-GCM bound to
// the bucket's address, the slot's index and the bucket's version, so real
// blocks and dummy slots are indistinguishable and a storage operator that
// flips, moves, truncates, replays or deletes a bucket produces
// seal.ErrTampered (which is kv.ErrTampered), never wrong data.
//
// It must never hold protocol state (position maps, stashes, versions are
// the caller's), never store a logical key (a block carries only BlockID,
// a PRF of the key), never treat a missing bucket as empty, and never split
// a set of buckets a caller reads or writes together into several backend
// calls.
package tree
