// Package taostore implements TaoStore's asynchronous ORAM, TaORAM:
// concurrent, asynchronous Path ORAM through a trusted proxy, secure when
// the network between proxy and storage is asynchronous and the adversary
// sees when replies leave the proxy. It follows TaoStore Sec. IV.
//
// The package owns the Processor and the Sequencer of the paper (Fig. 4):
//
//   - Request map (Sec. IV-B step 1): only the first of several concurrent
//     requests for a block reads the block's real path; the others read
//     uniformly random paths ("fake reads"), so repetition never shows.
//   - Response map (step 4): a request is answered only once its own path
//     has returned, even when its answer is known earlier.
//   - Sequencer (step 4): replies leave in the order the requests arrived,
//     which defeats the CURIOUS attack of Sec. II-B.
//   - Local subtree with per-node timestamps and a multiset of outstanding
//     path requests (step 2), keeping the fresh-subtree invariant: every
//     block in the subtree and the stash is up to date, and the storage
//     holds the latest contents of every other block.
//   - Each returned path is synced with the subtree and flushed at once
//     (step 3); every K flushed paths an asynchronous write-back sends those
//     paths' buckets, never blocking new reads. When a write-back completes,
//     only nodes neither updated nor requested since it started are dropped.
//   - Write-backs carry increasing version numbers and the storage keeps a
//     bucket only if its version is newer (backend.WriteVersioned: a Lua
//     compare-and-set on Redis, a checked batch on pebble), so a late
//     write-back never overwrites a newer one.
//   - Optionally, the top CachedLevels levels live in proxy memory and are
//     never sent to storage (Sec. IV-D).
//
// Durability (internal/durable): every path processed is journaled, its
// buckets as the flush left them, the answered block's position and the
// stash, and its replies leave only once that record is durable; every
// write-back's version and buckets are journaled before it is issued. One
// goroutine, the committer (commit.go), syncs the journal for every
// request: each sync covers every record appended before it (group
// commit), the next starts as soon as it ends while records are pending,
// and after each one the committer lets out the path reads whose plans and
// the replies whose records it made durable, the replies still in arrival
// order. No request waits for an fsync in its own goroutine. Every
// DefaultEvery records, and at Close (after writing the whole subtree
// back), a checkpoint of the whole state replaces the journal. Opening an
// existing store replays the records after the checkpoint, which leaves
// every bucket changed since in the subtree, writes the whole subtree back
// under a version above every journaled one (which redoes any write-back
// storage lost) and checkpoints: a kill -9 or a power cut loses nothing
// acknowledged, and storage sees writes to buckets it saw written before.
// Every path read is journaled before it is issued and, when storage fails
// it, issued again unchanged until it succeeds; one a crash cut short (or
// the store closed on) is read again, identically, and processed at the
// next open, so a block whose real read storage served never stays on that
// path for its next access to read again.
//
// It also owns storage's view of TaoStore (view.go: path reads and
// write-backs; schedule.go: TaORAM's write-back schedule) and its
// registration with `oblivkv audit` (audit.go, with the CURIOUS check in
// curious.go).
//
// It must never let a backend call depend on anything but the arrival of
// requests and the network's schedule: no path, count or timing may depend
// on which keys are asked for, whether they exist, or whether they repeat.
package taostore
