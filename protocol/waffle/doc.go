// Package waffle implements Waffle, an online oblivious datastore
// against a passive persistent adversary, registered as "waffle". It
// follows Waffle Secs. 4-7.
//
// Requests are gathered into batches of at most R (closed early by
// Options.Timeout, on the clock of TestingKnobs.Clock) and served by
// Algorithm 1, one batch at a time:
//
//   - requests are deduplicated by key and applied in arrival order, so a
//     read after a write of the same key in one batch sees the write; cache
//     hits need no read;
//   - every batch reads exactly B distinct objects: r real queries (keys on
//     storage, and one dummy for each insert, whose place the new key
//     takes), f_D fake queries on dummies and f_R = B-r-f_D fake queries on
//     real objects not in the cache, both picked least recently accessed
//     first from ordered indexes of timestamps (index.go);
//   - an object's storage id is prf(domain, key, ts), ts the batch that last
//     read it; values are padded to the value size and sealed with the id as
//     associated data; every object read is deleted from storage, so each id
//     is written once and read once;
//   - every real object read enters the LRU cache of C objects and evicts
//     one entry, written back under a fresh id; dummies read are
//     re-encrypted under fresh ids. So every batch is one Read of B
//     addresses, one Write of B new ones and one Delete of the B read,
//     whatever the workload, each listed in a random order, so that no
//     place in a call marks a real query or a dummy;
//   - the dummies' ordering timestamps are reset each time all of them
//     have been accessed (every D/f_D batches in a full store); equal
//     timestamps are ordered by the dummies' random ids, as in the paper's
//     BST on <ts : key>, so every round picks them in one order and a
//     dummy's alpha stays within ceil(D/f_D).
//
// Inserts and deletes (Sec. 6.2, last paragraph): a store of capacity N
// holds N+D objects at all times; the spare capacity is held by dummies.
// An insert takes a dummy's place (the dummy is read in the insert's real
// query slot and not written back); a delete turns the key's cache entry
// into a new dummy. A fresh store holds N+D dummies, C of them in the
// cache (a cache empty of real objects). kv.ErrFull is returned when N
// keys exist. Theorems 7.1/7.2 (TheoreticalAlpha, TheoreticalBeta) are the
// bounds for a full store; with fewer keys the dummy pool is larger.
//
// # Restart and crashes
//
// The proxy's state (cache with its values, timestamps, dummies, counters)
// is journaled on the proxy's disk (internal/durable), two records per
// batch: the batch's reads, in the order its Read lists them, before the
// Read is issued; then what the batch changed (the objects it removed,
// those it put on storage and the cache entries it touched, with their
// timestamps and values) with its Write and Delete, before they are
// issued and before any of its requests is answered. When R requests are
// waiting, the next batch's reads are journaled in the same group commit
// as that record, so a loaded store syncs its journal once per batch. Every
// durable.DefaultEvery records, and at Close, a checkpoint of the whole
// state replaces the journal. Opening an existing store loads the
// checkpoint, replays the batches after it and issues their Writes and
// Deletes again, in order: a crash (kill -9, power loss under the default
// fsync policy) loses no acknowledged request, and storage sees again only
// calls it saw, or would have seen. A batch whose reads were journaled but
// not the batch (the proxy died after its Read, or the Read failed) is run
// again on the same addresses, listed in the same order, with no requests,
// before anything else reaches storage: reading other objects in place of
// some would tell storage which ones were real queries. A bulk load is
// journaled before it writes anything and checkpointed once its objects
// are all written; cut short, it leaves the store as it was (empty).
// Storage restored from a copy older than the proxy's checkpoint is
// refused at open.
//
// A failed Write of a committed batch is retried before the next batch, so
// storage never falls behind the proxy; the batch's requests report the
// error, and their effect is kept.
//
// The package owns the proxy's state (cache, timestamps, ordered indexes,
// dummies) and everything under "wf/" on storage: the objects under
// ObjectPrefix, with storage's view of them (view.go: alpha, beta, fresh
// ids) and its registration with `oblivkv audit` (audit.go). It must
// never let what storage sees depend on the requests (every batch is the
// same three calls of B addresses), never read or write a storage id
// twice, never store a logical key or an unsealed value, and never
// answer from an object that fails to open.
package waffle
