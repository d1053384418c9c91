// Package treebeard implements Treebeard: Ring ORAM spread
// over several storage trees and three layers of trusted processes,
// here wired in one process.
//
//   - Router (Sec. 5.1): collects requests for an epoch (default 1 ms) and
//     forwards each to the Stash shard chosen by a hash of its key.
//   - Stash shards (Sec. 5.2): the position map (block -> tree, leaf), the
//     stored keys' names (for kv.KeyLister, carried by the requests that
//     may store a block) and the stash of the blocks hashed to them. The first request for a block
//     not in the stash reads its real path; repeats and stashed blocks read
//     a random path of a random tree (fake reads), so repetition and skew
//     never show. Every access moves the block to a fresh random tree and
//     leaf (random tree and random path invariants, Sec. 3). Requests to a
//     block are applied in the order the shard receives them (Sec. 5.2.3).
//     Blocks handed to an eviction leave the stash only when acked and not
//     accessed since (per-block counters, Sec. 5.2.2).
//   - ORAM shards (Sec. 5.3): each tree has exactly one owner, which merges
//     the path reads queued for it into one multi-path read (each shared
//     bucket read once, min(paths crossing it, Z) slots of it) and, after
//     every A path reads of the tree, evicts the next k paths in
//     reverse-lexicographic order with the tree's blocks collected from
//     every Stash shard. The top levels of each tree stay in the shard's
//     trusted memory (Options.CachedLevels), so storage holds and sees
//     only the levels below them. Bucket mechanics (metadata, slots,
//     reshuffles, where an eviction places blocks, the top levels) are
//     package ringoram's.
//
// The layers meet only through the interfaces in layers.go, each call one
// message and one reply of messages.go: plain values with a MsgID (which
// carries the store's incarnation, incarnation.go, so ids never repeat
// across restarts), a Status on every reply, a transport failure answered
// by sending the same message again, every copy of a message answered
// once (msgTable, part of the state and images of every Stash shard and
// every tree; it never forgets a released id) and every client
// request, named by its RequestID, applied once (requests.go), so a
// cluster can put RPCs and replication between them without changing
// their logic. Each message and reply has a strict, versioned binary
// encoding (wirecodec.go); on the sealed wire (wire.go: TestingKnobs.Wire,
// the tests' lossy network, and a Network between a cluster's
// processes, each serving its endpoints with a Receiver) each crosses
// sealed under the store key, bound to its kind, its MsgID and both
// ends, so the network sees who
// talks to whom and how much, never block ids, values or positions. A tree gives up an epoch whose last part does not come
// (treeCore.abandon). The store's bulk loads, checkpoints, restores and
// stats are messages too (Admin); only journal replay reaches into the
// cores.
//
// Each layer is a deterministic core driven by a driver. The cores
// (routercore.go, stashcore.go, oramcore.go) hold the layer's state and
// turn inputs into outputs with no I/O, goroutine or clock, their
// randomness drawn from a seeded source held in their state: a Router's
// epoch cut into per-shard batches; a Stash shard's position map, stash
// and request queues, which plan an epoch's path reads, answer requests
// as reads return and hand blocks to evictions; a tree's epoch barrier
// and eviction schedule. The drivers (Router, Stash, treeWorker) own the
// timers (on the store's clock, TestingKnobs.Clock), goroutines, journal
// and backend calls. A Router and a Stash shard are machines a log can
// drive: every input of their cores is an entry (routerEntry, stashEntry:
// a request, an epoch's cut, a batch with the room its new keys may take,
// a tree's results of a part, reduced to the real reads' outcomes, an
// epoch's end, an eviction's hand-off and acknowledgement, a release),
// applied one at a time in the order the driver takes them, and their
// whole state, reads in flight and replies half assembled included,
// encodes to the same bytes whenever it is the same (routerImage,
// stashImage). So is each tree of an ORAM shard (oramMachine): its
// inputs are the parts of epochs (a copy of a part gets the reply the
// machine keeps until the part is released, or a refusal after that,
// and is never read again), the epochs' timers firing, the Stash
// shards' blocks and answers in an eviction, the metadata and real blocks
// storage returned (opened by the driver, never a sealed slot) and the
// journal's acknowledgement; its outputs name the storage Reads, the
// unsealed Write, the replies, the messages to the Stash shards and the
// journal records (oramImage holds an operation in flight). A tree's
// buckets are ringoram.Tree's, whose every change is journaled as a
// ringoram.Change.
//
// Eviction schedule: A counts path reads of a tree, as Ring ORAM counts
// accesses and as the paper's proof states it (App. B: "every A accesses
// to a storage tree triggers the eviction of k deterministically chosen
// paths"). An eviction runs with the multi-path read that brings it due,
// in the same round trip (ringoram.Driver.ReadEvict); when one read owes
// several evictions they run as one eviction of all their paths. The
// schedule depends only on the number of paths read, which storage sees.
//
// Stale copies: a block accessed while an eviction places it stays in the
// stash with its new value and position; the copy the eviction wrote is
// reported back to the tree's owner, which never serves it again and frees
// its slot at the bucket's next rewrite.
//
// Durability (internal/durable): each Stash shard and each tree is a
// machine with its own log in the store's one journal, and its own
// checkpoints (logs.go); the Routers hold nothing durable. Each tree
// journals the plan of each multi-path read and eviction (ringoram.Plan:
// the seed of its choices) before it reads a slot, and recovery runs an
// operation cut short after that again under its plan, issuing the same
// Reads (Treebeard Sec. 5.3.3). Each Stash shard journals, at the end of
// each epoch and before its replies leave, where the epoch's blocks are
// and what the stashed ones hold; the records of concurrent epochs share
// an fsync. Two rules keep those records ahead of storage: a block read
// moves to its new position only once it is in the stash, and a block an
// epoch changed joins no eviction before that epoch's record is in the
// journal. Each tree journals every multi-path read and eviction with its
// ringoram.Change (bucket versions, the blocks a read took out, the blocks
// an eviction placed, which blocks the cached buckets it changed hold)
// and the blocks it took out for each Stash shard before its Write is
// issued (the Write then goes to storage with the tree's next Read, in
// one round trip, or alone when no read is queued, once the record is
// durable: the record has no fsync of its own), and the end of each
// eviction (the copies left stale); a shard journals its answer to an
// eviction's end (the blocks that left its stash). A record holds no
// sealed item: the Write follows from the state, the plan and what the
// Reads bring in. A tree keeps the blocks its reads took out (handover)
// until their shard has journaled their epoch. A machine whose log holds
// checkpointEvery records checkpoints itself between its own steps
// (a tree between two operations), while the others go on; Close
// checkpoints every machine. Opening an existing store rebuilds each
// machine from its own checkpoint and records, never another's; applies
// each tree's operations whose Writes are on storage and runs the others
// again under their plans, writing them (records.go, settleOps); sends
// the Stash shards again the end of an eviction cut short (a shard
// answers a copy from its record, or finds a placed copy whose block is
// still stashed stale) and the blocks the trees kept for them (a block
// still where its read found it goes back to the stash); runs the
// evictions owed; and checkpoints: a kill -9 loses nothing acknowledged. A
// journal of the previous build (one machine, the whole store) is
// replayed as that build did and moved to a log per machine
// (reopenEarlier). A fresh store writes its trees at its first access, at
// Prepare or in a bulk load; a creation or a load cut short leaves a store
// whose trees are written afresh.
//
// The package also owns storage's view of Treebeard (view.go: every
// tree's operations, parsed with ringoram.View, and the audits of the
// paper that storage's view alone supports) and its registration with
// `oblivkv audit` (audit.go: the audit ends each epoch itself).
//
// It must never let a backend call depend on which keys are asked for,
// whether they exist or repeat, or what they hold: per epoch, one path
// read per forwarded request, each of a uniformly random tree and leaf.
package treebeard
