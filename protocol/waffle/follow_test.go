package waffle_test

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/oblivkv/oblivkv/audit"
	"github.com/oblivkv/oblivkv/observe"
	"github.com/oblivkv/oblivkv/protocol/waffle"
)

// The audits that follow one key, and that place a batch's real objects,
// need ground truth the Tap does not show: which object each address of a
// batch's Read and Write holds, the order the batch planned its real
// queries in and the order the cache evicted the Write's victims in. The proxy's trace (waffle.Traced) reports it; the
// positions tested are places in the Read and the Write as the Tap shows
// them, and followChecks checks the trace against the Tap.
//
// Which positions of one key storage sees, and which Waffle promises are
// fresh at every access (Sec. 5.1, Algorithm 1):
//
//   - its storage id, PRF(key, ts) with ts the batch that last read it, is
//     fresh at every write and read once (the exact check fresh ids), and
//     as a PRF output uniform and independent of the key's other ids: the
//     id's first two bytes are the position followed (an id unique but
//     derived from the key in part passes fresh ids);
//   - its place in the Read of a batch that reads it from storage is: the
//     Read lists the batch in a fresh random order;
//   - its place in the Write that writes it back when the cache evicts it
//     is: the Write lists the batch in a fresh random order.
//
// So a key is followed three times, through its ids, its places in the
// Reads that read it and its places in the Writes that wrote it
// (audit.FollowKey, in positionBins bins), every key of both workloads: a
// hot key is not followed alone, as in the other protocols' audits,
// because it stays in the cache (every real object read enters it, and a cached key is served
// without storage), so storage sees nothing of it to follow; under Zipf
// the popular keys are followed as often as they leave the cache. Most
// places of every batch belong to some key followed, so the uniform part
// of the places counts about B/positionBins in each bin every batch and
// tests little (a statistic near 0): the other two parts carry the test,
// and the uniform part the ids'. The walks are kept apart: interleaved, a place derived from the key would
// show only as pairs of a Read and a Write place, which are independent
// even then.
//
// And where a batch puts its real objects (audit.Placements, in
// positionBins bins): the real objects of its Write, the cache's victims,
// land at places uniform over the Write and independent of the order the
// cache evicted them in, and its real queries sit at places of its Read
// uniform and independent of the order the batch planned them in (their
// keys' first requests' arrival). The eviction order is least recently
// used first, which is about the order in which fake queries read the
// victims again (least recently accessed first): a Write in eviction
// order shows in storage's view too, as write position and age.
//
// audit.Choices (the rank of each object a read chooses among its unit's
// unread ones is uniform) is not made. Fake queries choose no object at
// random: the least recently accessed first, by timestamp (Sec. 4,
// Challenge 2; it is what bounds alpha, Theorem 7.1), dummies of one
// timestamp in the order of their random ids, so in any order the proxy
// knows the rank is no uniform draw, and the check on ground truth would
// fail the protocol as specified. The uniformity Waffle needs is in
// storage's order: when each object of a Write is read again must not
// depend on its place in the Write, which the Write's random order gives.
// That is a property of the Tap alone, and it is the one "write position
// and age" already tests: every id of a Write is read once, within alpha,
// so a read that favours some places of a Write at some ages favours the
// others at later ages (a Write with its dummies first fails it by 7,109
// against 45: leakDummiesWrittenFirst).

// idPositions are the positions of a storage id followed: its first two
// bytes.
const idPositions = 1 << 16

// The checks' names: followChecks names them after what they follow,
// and the parts of each as audit.FollowKey and audit.Placements name them.
const (
	checkIDWalk         = "one key's storage ids"
	checkReadWalk       = "one key's places in the Reads"
	checkWriteWalk      = "one key's places in the Writes"
	checkWritePlacement = "real objects' places in the Write, gathered in eviction order"
	checkReadPlacement  = "real queries' places in the Read, gathered in plan order"

	followIndependent    = ": consecutive positions of one key independent"
	followAgain          = ": same position again"
	placementIndependent = ": slot independent of gathering order"
)

// objectCalls returns the Reads and the Writes of objects in records, in
// order.
func objectCalls(records []observe.Record) (reads, writes [][]string) {
	for _, r := range records {
		switch {
		case r.Err || !waffle.IsObjectCall(r):
		case r.Op == observe.OpRead:
			reads = append(reads, r.Addrs)
		case r.Op == observe.OpWrite:
			writes = append(writes, r.Addrs)
		}
	}
	return reads, writes
}

// access is one storage access of a key: batch k read it (write false) or
// wrote it (write true) at place at of its Read or its Write.
type access struct {
	k, at int
	write bool
}

// followChecks makes the checks of this file's comment on the Tap's
// records of a run's batches (after the bulk load) and the proxy's trace
// of them, with batches of b objects.
func followChecks(t *testing.T, name string, batches []observe.Record, traced []waffle.TracedBatch, b int) []audit.Check {
	t.Helper()
	reads, writes := objectCalls(batches)
	if len(reads) != len(traced) || len(writes) != len(traced) {
		t.Fatalf("the Tap shows %d batch Reads and %d Writes; the proxy traced %d batches", len(reads), len(writes), len(traced))
	}
	for k := range traced {
		if len(reads[k]) != b || len(writes[k]) != b {
			return []audit.Check{audit.Exact(name+": batches of B objects, whose places compare", []string{fmt.Sprintf(
				"batch %d reads %d and writes %d objects where B = %d (the batch sizes check fails)", traced[k].TS, len(reads[k]), len(writes[k]), b)})}
		}
	}
	accesses := map[string][]access{}
	var written, read []audit.Placement
	for k, tb := range traced {
		for j, rf := range tb.Read {
			if !rf.Dummy {
				accesses[rf.Key] = append(accesses[rf.Key], access{k, j, false})
			}
		}
		for j, rf := range tb.Written {
			if !rf.Dummy {
				accesses[rf.Key] = append(accesses[rf.Key], access{k, j, true})
			}
		}
		written = append(written, placed(tb.Written, tb.Evicted)...)
		read = append(read, placed(tb.Read, tb.Queried)...)
	}
	idWalks, readWalks, writeWalks := walks(t, accesses, reads, writes)
	return slices.Concat(audit.FollowKey(name+": "+checkIDWalk, idWalks, idPositions, positionBins),
		audit.FollowKey(name+": "+checkReadWalk, readWalks, b, positionBins),
		audit.FollowKey(name+": "+checkWriteWalk, writeWalks, b, positionBins),
		audit.Placements(name+": "+checkWritePlacement, written, positionBins),
		audit.Placements(name+": "+checkReadPlacement, read, positionBins))
}

// placed returns where the real objects of one call of a batch, objs in
// the call's order, sit in it, and their places in the order the batch
// gathered them: gathered[j] orders objs[j] among those gathered (-1 for
// objects gathered otherwise: dummies, fake queries).
func placed(objs []waffle.Ref, gathered []int) []audit.Placement {
	var real []int // places in the call of the real objects
	for j, rf := range objs {
		if gathered[j] >= 0 && !rf.Dummy {
			real = append(real, j)
		}
	}
	slices.SortFunc(real, func(i, j int) int { return cmp.Compare(gathered[i], gathered[j]) })
	out := make([]audit.Placement, len(real))
	for g, j := range real {
		out[g] = audit.Placement{Slot: j, Slots: len(objs), Gathered: g, Of: len(real)}
	}
	return out
}

// walks returns each key's ids read, its places in the Reads and its
// places in the Writes, in the order of its accesses, after checking the
// trace against the Tap: the address a key is written to is the address
// its next access reads.
func walks(t *testing.T, accesses map[string][]access, reads, writes [][]string) (idWalks, readWalks, writeWalks [][]int) {
	t.Helper()
	for _, key := range slices.Sorted(maps.Keys(accesses)) {
		var iw, rw, ww []int
		for i, a := range accesses[key] {
			if a.write {
				ww = append(ww, a.at)
				continue
			}
			id := reads[a.k][a.at][len(waffle.ObjectPrefix):]
			iw, rw = append(iw, int(binary.BigEndian.Uint16([]byte(id)))), append(rw, a.at)
			if i == 0 {
				continue
			}
			prev := accesses[key][i-1]
			if !prev.write {
				t.Fatalf("key %s: read by batches %d and %d, not written back between", key, prev.k, a.k)
			}
			if got, want := reads[a.k][a.at], writes[prev.k][prev.at]; got != want {
				t.Fatalf("key %s: batch %d wrote it to %x, the next batch that read it read %x", key, prev.k, want, got)
			}
		}
		idWalks, readWalks, writeWalks = append(idWalks, iw), append(readWalks, rw), append(writeWalks, ww)
	}
	return idWalks, readWalks, writeWalks
}
