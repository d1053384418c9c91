// Package cloak implements Cloak, an oblivious store whose storage
// accesses follow a fixed temporal distribution, registered as "cloak".
// It follows Cloak Secs. 3-6. The adversary may inject queries and sees every
// storage call, but not the traffic between clients and the proxy nor its
// timing.
//
// Storage holds sum_d d*b_d physical addresses under AddrPrefix, each
// sealed with its address and the id of the batch that last wrote it (a
// replayed element fails to open). The proxy keeps the position map (key
// to address and back, each address's last batch id), so it knows every
// address's reuse-distance set: set d holds the addresses last written d
// batches ago.
//
//   - Budgets (Algorithm 3, options.go): b_d = ceil(b_1/d^s), at least 1,
//     until sum_d d*b_d >= N; the batch size is beta = sum_d b_d, and set
//     d holds beta - sum_{i<d} b_i addresses when a batch is formed.
//   - Every Delta a batch leaves with exactly b_d addresses from every set
//     d, whatever the clients do: first the keys waiting in that set's
//     queue, in arrival order, then dummies, preferring the addresses whose
//     keys clients asked for most recently (Sec. 4.2), ties broken by a
//     random order of each set's members that storage never sees. One
//     backend Read of the beta addresses in a random order, then one Write
//     of the same addresses with the elements re-encrypted under the batch
//     id and randomly permuted: they become the newest set.
//   - Clients (Algorithms 1-2, client.go): a write updates the cache, is
//     acknowledged once journaled (below) and waits in its key's entry for
//     the next batch that holds the key; a read is answered from the cache, from a write
//     still waiting (line 13), by joining a read already waiting (line 16),
//     or by the next batch that holds the key, as soon as that batch is
//     read and before its write-back (Sec. 4.1). A write answers every
//     read waiting on its key (line 18). The keys waiting are bounded by Options.Pending; a request
//     that would add one waits for a batch (lines 20-21).
//   - Inserts take a free address (sum_d d*b_d >= N leaves at least N), so
//     the new key's first batch writes it; a delete is a write of "absent"
//     that frees the address once a batch has written it. kv.ErrFull is
//     returned at N keys.
//   - A batch whose backend calls fail is sent again, unchanged, at the
//     next tick; nothing acknowledged is lost, and the reads waiting on it
//     get the error. If the batch finds its own write-back on storage (a
//     Write reported failed that took effect), it commits without writing
//     again.
//
// # Restart and crashes
//
// The proxy's state is journaled on its own disk (internal/durable,
// journal.go), each change in the order it was made: a client's write
// (key, value, and the free address a new key takes), durable before the
// write is acknowledged, concurrent writers sharing one fsync; a new
// batch (its id, its addresses in the order of its Read, its
// permutation), durable before its Read is issued; and the batch's
// commit, after its Write, carried to disk by the next fsync. A read
// answered from a write waits for that write's record, so no client sees
// a write a crash could undo. Every CheckpointBatches batches (counted
// in batches, which storage sees, never in client writes, which it must
// not), and at Close, a checkpoint of the whole state (position map, free
// list, next batch id, writes not yet on storage, a failed batch to send
// again) replaces the journal, with an anchor write on storage.
//
// Opening an existing store loads the checkpoint and applies the records
// after it. A batch without its commit (the crash came between its record
// and its Write, or before the commit's fsync) is sent again, unchanged,
// at the first tick, exactly as a batch whose backend calls failed: if
// storage already holds its write-back, it commits without writing.
// Storage sees again a Read it saw (or would have seen), never a new
// choice of the same sets, whose common addresses would be the real
// queries. A bulk load cut short leaves an empty store, its layout
// written afresh. A crash (kill -9, power loss under the default fsync
// policy) loses no acknowledged write; storage restored from a copy older
// than the proxy's checkpoint is refused at open. The cache of recent
// values starts empty.
//
// The package owns the proxy state and everything under "ck/" on storage,
// storage's view of it (view.go: the batches' budgets, streaks and
// checkpoints) and its registration with `oblivkv audit` (audit.go: the
// batches' ticker runs on TestingKnobs.Clock, a fake clock the audit
// ticks). It must never let what storage sees depend on the requests
// (every batch is b_d addresses from every set d, every Delta), never
// read an address twice within one set's lifetime, never store a key or
// an unsealed value, and never answer from an element that fails to open.
package cloak
