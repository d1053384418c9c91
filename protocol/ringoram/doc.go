// Package ringoram is one Ring ORAM storage tree, as Treebeard uses it:
// buckets of Z+S slots (the paper sets Z=1), each slot its own backend
// address, with a sealed metadata record per bucket stored beside its
// slots. It is the Ring ORAM of Ren and others, as Treebeard Sec. 2 and
// Sec. 5.3 describe it. A path read
// fetches one slot per bucket, early reshuffles rewrite a bucket after S
// reads (once fewer than Z of its dummies are left), and evictions
// rewrite k paths at a time in reverse-lexicographic order, moving every
// block they read as deep as its leaf allows. Several path reads are served together
// (multi-path reads, Sec. 5.3.1) and several paths are evicted together
// (multi-path evictions, Sec. 5.3.2).
//
// A Tree owns what is needed to use one storage tree safely: the layout
// of its buckets on storage (Layout), the metadata format, and the trusted
// state kept in memory: the buckets of its top levels, which never go to
// storage (Config.CachedLevels, as TaoStore caches the top of its tree),
// the expected metadata version of every bucket (a
// replayed metadata record is ErrTampered), a copy of each bucket's
// metadata once it has read or written it (so operations skip the
// metadata Read), the eviction counter, and the copies the caller
// declared stale (Forget). It never holds a position map
// or a stash: which leaf a block is mapped to and which blocks wait for
// eviction are the caller's (an ORAM shard). A Tree is a deterministic
// machine: it never calls a backend, reads a clock or starts a goroutine.
// Each operation runs as steps (step.go) whose outputs name the Reads
// and the Write to issue and whose inputs are what storage returned,
// opened; its random choices come from a seed of its own, in its Plan,
// and its whole state, an operation in progress included, is an Image.
// A Driver runs a Tree on a backend: it issues the I/O, opens what
// storage returns, seals what the Tree writes (with fresh nonces), and
// hands each operation's Plan to its owner before any slot is read
// (Config.ReadAhead), so an operation a crash cut short can run again
// reading the same slots (Resume), and each operation's Change before
// its Write (Config.WriteAhead), so that an owner that journals Changes
// and not Writes can find out after a crash whether a Write reached
// storage and, if not, run its operation again and write it (Landed,
// Redo). A Tree and its Driver are not safe for concurrent use: their
// owner is their only reader and writer.
//
// A Tree may have several operations in progress, so that one's Reads go
// to storage while another's are out (Beside; the Driver runs one at a
// time). One starts beside the others only when none of the buckets of
// its paths below the top is one they rewrite whole and at most one of
// them evicts; it plans on the buckets they read as they leave them, and
// operations take their slots and end in the order they started, the
// top levels taken from as each one takes its slots. Each then reads,
// writes and returns exactly what it would have, started once the ones
// before it ended: storage sees the same calls, some Reads sooner, in an
// order that depends only on the leaves and k.
//
// Every slot, real or dummy, is sealed by tree.Codec bound to its bucket's
// address, its slot index and the bucket's slot version, so dummies and
// real blocks are indistinguishable and a slot cannot be moved or
// replayed; the metadata is sealed bound to its own address and carries a
// version the Tree checks. A missing, truncated, moved, flipped or
// replayed record is an error wrapping seal.ErrTampered, never wrong data.
//
// The package also owns storage's view of a tree (view.go): its calls
// parsed into multi-path reads and evictions (View), and the slots those
// reads choose, for the audits of the protocols built on it.
//
// A Tree must never read two slots of one bucket in one path read, never
// let a backend call depend on which block is wanted (the addresses of
// every call depend only on the leaves, k and fresh random choices; a
// wanted slot and a dummy slot look alike), never treat a missing bucket
// as empty, and never split one bucket's slots and metadata across two
// backend writes (Treebeard Sec. 5.3.3: the bucket and its metadata are
// updated in one atomic write).
package ringoram
