// Package oblivistore implements ObliviStore, an asynchronous
// partition ORAM: the partitioning framework of Stefanov, Shi and Song
// with hierarchical partitions, a background shuffler and oblivious
// scheduling.
//
// The package owns the protocol's trusted state and its storage layout:
//
//   - about sqrt(N) partitions, each with levels 0..L, level l holding
//     2*2^l slots at least half of them dummies, permuted and sealed under
//     a nonce drawn at each write (ObliviStore Sec. V-C);
//   - the position map (partition, level, slot), the eviction cache with
//     its eviction rate nu, and the storage cache (Sec. III-A, V-B);
//   - the partition reader with real, dummy and early cache-ins (Table I,
//     Fig. 6), and the background shuffler with batch shuffling (Fig. 7);
//   - the four semaphores of Sec. V-D, every change of which depends only
//     on arrivals, I/O completions and public coins (Invariant 1).
//
// Core is the protocol as a deterministic state machine: its inputs are
// requests, read results and write completions; its outputs are backend
// reads and writes (slots, nonces and plaintext blocks) and replies.
// Inside it, the ORAM main algorithm (Front: position map to partitions,
// eviction cache, admission and answers) and the partitions (Server:
// levels, storage cache, partition reader, shuffler, storage I/O) talk
// only in the plain messages of messages.go, so that the oblivious load
// balancer of Sec. VI-A can later treat remote ORAM nodes as partitions.
// It
// never does I/O, reads a clock or starts a goroutine, and draws its
// randomness from two seeded sources in its state, so Snapshot and
// Restore, and replaying its inputs, give the same outputs. The driver
// (store.go) owns the goroutines and the backend: it journals every input
// before any output it causes leaves the process, seals and opens slots,
// and on recovery restores the checkpoint, replays the inputs, redoes
// their writes and reissues the reads left in flight.
//
// Unlike the paper, concurrent requests for one block never wait for each
// other: later ones read fake, and replies leave in arrival order (the
// leak of TaoStore Sec. II-B). docs/protocols.md lists every departure.
//
// It also owns storage's view of its partitions (view.go: partition calls,
// slots read once, levels read once, slot choices) and its registration
// with `oblivkv audit` (audit.go).
//
// It must never let a backend call, its timing or a semaphore depend on
// which keys are asked for, whether they exist or whether they repeat,
// and never answer with data that did not open under its slot's address
// and nonce.
package oblivistore
