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
// The protocol runs as deterministic state machines (Machine: apply an
// entry, return its outputs; snapshot; restore), each a log can drive:
// the ORAM main algorithm (FrontMachine: position map to partitions,
// eviction cache, admission and answers; the load balancer of Sec. VI-A)
// and the partition groups (GroupMachine: a set of partitions with their
// levels, storage cache, partition reader, shuffler, semaphores, random
// source and ids; an ORAM node of Sec. VI). They talk only in the plain
// messages of messages.go, each named by its sender, incarnation and
// sequence number, applied by its receiver in order and once, and kept by
// its sender until acknowledged, to be sent again at each Resend entry (a
// driver's retransmission timer turned into an entry) (link.go);
// between processes a message crosses sealed under the store key
// (wire.go). A machine never does I/O, reads a clock or starts a
// goroutine: storage calls are a group's outputs, their results its
// entries, and its random sources are in its snapshots. Core composes the
// Front and the groups in one process, routing their messages in order;
// its inputs are requests, read results and write completions. The
// driver (store.go, journal.go) owns the goroutines and the backend: it
// journals the entries a machine applies in a step, and in the steps
// after it until another machine's record comes between (acknowledgements
// alone aside: Core.Entries), as one record of that machine's own log
// before any output they cause leaves the process, checkpoints each
// machine on its own while the others run, issues every storage write of
// a group from one function (store.write), seals and opens slots, and on
// recovery restores each machine from its own checkpoint and entries,
// delivers the messages a crash kept from their receivers, redoes the
// writes and reissues the reads left in flight.

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
