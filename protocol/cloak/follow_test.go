package cloak_test

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/cloak"
)

// The audits that follow one key, and that place a batch's real elements,
// need ground truth the Tap does not show: which address of a batch held
// which key, which were real queries, in which order the batch took them,
// and where each element went. A traced store (cloak.Traced) reports it;
// the positions tested are places in the batch's Read and Write as the
// Tap shows them, and followChecks checks the trace against the Tap.
//
// Which positions of one key storage sees, and which Cloak promises are
// fresh at every access (Sec. 5.1):
//
//   - its physical address is not: the element read by a batch is written
//     back among that batch's beta addresses, so its next address is one
//     of them, and the same address again comes with probability about
//     1/beta, not 1/N (what storage learns from that is CloakStreaks');
//   - its place in the batch's Read is: the Read lists the batch in a
//     fresh random order, so the place is uniform over the beta places and
//     independent of the key and of its places at every other access;
//   - its place in the batch's Write is: the write-back permutation is
//     fresh and random, so the place its element lands in is uniform and
//     independent likewise, of its place in the Read too.
//
// So a key is followed twice, through its places in the Reads that read
// it and through its places in the Writes that wrote it back
// (audit.FollowKey, in followBins bins; the hot key, read once a batch,
// in hotFollowBins, so that cells expect about six pairs). Where every
// key is followed, a batch's places are all taken but the few of free
// addresses, so the uniform part counts about beta/bins in each bin every
// batch (a statistic near 0 when bins divides beta) and tests little:
// there the other two parts carry the test, and the hot key's walk the
// uniform one. The walks are
// kept apart: interleaved, a place derived from the key would show only
// as pairs of a Read and a Write place, which are independent even then.
// And the elements of a batch's real queries land at places of its Write
// that are uniform and independent of the order the batch took them in
// (set by set, each set's queue in arrival order): audit.Placements, in
// placementBins bins.
//
// audit.Choices (the rank of each address a read chooses among its unit's
// unread ones is uniform) is not made. The proxy's choice within a set is
// not uniform: real queries first, then dummies, the addresses whose keys
// clients asked for most recently (Sec. 4.2), so in any order the proxy
// knows the rank is no uniform draw, and the check on ground truth would
// fail the protocol as specified. What Cloak promises (Sec. 5.1) is
// uniformity in storage's order: every equal-size subset of a set equally
// likely, since the write-back permutation placed the keys at random and
// the choice never looks at storage's order (ties are broken by a secret
// one). That is a property of the Tap alone, and it is the one "write
// position and age" already tests: a set is one Write, an address's age
// is its set's reuse distance, and every address of a set is read once
// before the set runs out, so choices that favour some places of the
// Write at some ages favour the others at later ages (a choice in
// storage's own order fails it by 32,460 against 93:
// leakPublicTieOrder).
const (
	followBins    = 8
	hotFollowBins = 4
	placementBins = 8
)

// The checks' names: followChecks names them after what they follow,
// and the parts of each as audit.FollowKey and audit.Placements name them.
const (
	checkReadWalk  = "one key's places in the Reads"
	checkWriteWalk = "one key's places in the Writes"
	checkPlacement = "real elements' places in the Write, gathered in take order"

	followIndependent    = ": consecutive positions of one key independent"
	placementIndependent = ": slot independent of gathering order"
)

// tracer collects a traced store's batches.
type tracer struct {
	mu      sync.Mutex
	batches []cloak.TracedBatch
}

func (tr *tracer) batch(b cloak.TracedBatch) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.batches = append(tr.batches, b)
}

func (tr *tracer) all() []cloak.TracedBatch {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.batches)
}

// batchCalls returns the Read and the Write of physical addresses of
// every batch in records, in order (the layout's Writes come before the
// first batch Read and are left out).
func batchCalls(t *testing.T, records []observe.Record) (reads, writes [][]string) {
	t.Helper()
	for _, r := range records {
		if r.Err || len(r.Addrs) == 0 || !strings.HasPrefix(r.Addrs[0], cloak.AddrPrefix) {
			continue
		}
		switch {
		case r.Op == observe.OpRead:
			reads = append(reads, r.Addrs)
		case r.Op == observe.OpWrite && len(reads) > 0:
			if len(writes) != len(reads)-1 {
				t.Fatalf("call %d: a second Write of physical addresses after batch %d's Read", r.Seq, len(reads))
			}
			writes = append(writes, r.Addrs)
		}
	}
	return reads, writes
}

// access is one access of a key: batch k read its element at place read
// of its Read and wrote it back at place write of its Write.
type access struct{ k, read, write int }

// followChecks makes the checks of this file's comment on one run: the
// Tap's records and the store's trace. followed says which keys are
// followed.
func followChecks(t *testing.T, name string, records []observe.Record, traced []cloak.TracedBatch, followed func(key string) bool) []audit.Check {
	t.Helper()
	reads, writes := batchCalls(t, records)
	if len(reads) != len(traced) || len(writes) != len(traced) {
		t.Fatalf("the Tap shows %d batch Reads and %d Writes; the store traced %d batches", len(reads), len(writes), len(traced))
	}
	beta := len(traced[0].Read)
	if i := slices.IndexFunc(traced, func(b cloak.TracedBatch) bool { return len(b.Read) != beta }); i >= 0 {
		return []audit.Check{audit.Exact(name+": batches of one size, whose places compare", []string{fmt.Sprintf(
			"batch %d has %d addresses, batch %d %d (the budgets check fails)", traced[i].ID, len(traced[i].Read), traced[0].ID, beta)})}
	}
	accesses := map[string][]access{}
	var placements []audit.Placement
	for k, b := range traced {
		var real []int // places in the Read of the batch's real queries
		for j, a := range b.Read {
			if reads[k][j] != a.Addr {
				t.Fatalf("batch %d: the trace's address %d is %q, the Tap's %q", b.ID, j, a.Addr, reads[k][j])
			}
			if a.Key != "" && followed(a.Key) {
				accesses[a.Key] = append(accesses[a.Key], access{k, j, a.Write})
			}
			if a.Real {
				real = append(real, j)
			}
		}
		placements = append(placements, placed(b, real)...)
	}
	readWalks, writeWalks := walks(t, accesses, reads, writes)
	bins := followBins
	if len(accesses) == 1 {
		bins = hotFollowBins
	}
	return slices.Concat(audit.FollowKey(name+": "+checkReadWalk, readWalks, beta, bins),
		audit.FollowKey(name+": "+checkWriteWalk, writeWalks, beta, bins),
		audit.Placements(name+": "+checkPlacement, placements, placementBins))
}

// placed returns where the real queries of batch b, at places real of
// its Read, landed in its Write, and their places in the order the batch
// took them.
func placed(b cloak.TracedBatch, real []int) []audit.Placement {
	slices.SortFunc(real, func(i, j int) int { return cmp.Compare(b.Read[i].Taken, b.Read[j].Taken) })
	out := make([]audit.Placement, len(real))
	for g, j := range real {
		out[g] = audit.Placement{Slot: b.Read[j].Write, Slots: len(b.Read), Gathered: g, Of: len(real)}
	}
	return out
}

// walks returns each followed key's places in the Reads and in the
// Writes, in the order of its accesses, after checking the trace against
// the Tap: the Write place of one access is the address the next access
// reads.
func walks(t *testing.T, accesses map[string][]access, reads, writes [][]string) (readWalks, writeWalks [][]int) {
	t.Helper()
	for _, key := range slices.Sorted(maps.Keys(accesses)) {
		as := accesses[key]
		var rw, ww []int
		for i, a := range as {
			if i > 0 {
				prev := as[i-1]
				if got, want := reads[a.k][a.read], writes[prev.k][prev.write]; got != want {
					t.Fatalf("key %s: batch %d wrote it to %q, the next batch that read it read %q", key, prev.k, want, got)
				}
			}
			rw, ww = append(rw, a.read), append(ww, a.write)
		}
		readWalks, writeWalks = append(readWalks, rw), append(writeWalks, ww)
	}
	return readWalks, writeWalks
}
