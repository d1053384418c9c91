package treebeard

import (
	"cmp"
	"slices"

	"github.com/oblivkv/oblivkv/protocol/ringoram"
)

// treeCore is the schedule of one tree's ORAM shard as a deterministic
// state machine: the epoch barrier (an epoch is read once every Stash
// shard has sent its part of it) and the eviction schedule (k paths after
// every A path reads). Its inputs are the parts of epochs (part) and the
// multi-path reads done (served); its outputs are the epochs ready to read
// and the paths owed to eviction. The buckets themselves, their metadata
// and the I/O are ringoram.Tree's, whose changes are journaled as
// ringoram.Change. treeWorker drives both.
type treeCore struct {
	shards, a, k int
	leak         leak // tests only (leak.go)

	parts map[uint64]map[int][]ringoram.PathRead // epochs not all shards sent yet, by shard
	reads int                                    // path reads since the last eviction
}

// epochPart is one Stash shard's path reads of an epoch.
type epochPart struct {
	Epoch uint64
	Shard int
	Reads []ringoram.PathRead
}

func newTreeCore(shards, a, k int) *treeCore {
	return &treeCore{shards: shards, a: a, k: k, parts: map[uint64]map[int][]ringoram.PathRead{}}
}

// part takes shard's part of epoch. Once every shard has sent its part,
// empty or not, it returns them all, by shard: the epoch is read whole, in
// one multi-path read (Treebeard Sec. 5.3.1), never split by how its keys
// hash to shards. A part sent twice is reported as a duplicate and
// ignored.
func (c *treeCore) part(epoch uint64, shard int, reads []ringoram.PathRead) (ready []epochPart, duplicate bool) {
	if c.leak == leakEagerShardParts {
		return []epochPart{{Epoch: epoch, Shard: shard, Reads: reads}}, false
	}
	got := c.parts[epoch]
	if got == nil {
		got = map[int][]ringoram.PathRead{}
		c.parts[epoch] = got
	}
	if _, dup := got[shard]; dup {
		return nil, true
	}
	got[shard] = reads
	if len(got) < c.shards {
		return nil, false
	}
	delete(c.parts, epoch)
	for s, rs := range got {
		ready = append(ready, epochPart{Epoch: epoch, Shard: s, Reads: rs})
	}
	slices.SortFunc(ready, func(x, y epochPart) int { return cmp.Compare(x.Shard, y.Shard) })
	return ready, false
}

// counted is the number of reads that count towards the eviction every A
// reads: all of them (leakEvictOnRealReads: only the real ones).
func (c *treeCore) counted(reads []ringoram.PathRead) int {
	if c.leak != leakEvictOnRealReads {
		return len(reads)
	}
	n := 0
	for _, r := range reads {
		if r.Want != nil {
			n++
		}
	}
	return n
}

// served counts the path reads of a multi-path read that succeeded and
// returns the number of paths owed to eviction: k for every A reads
// (Treebeard Sec. 5.3.2), all of them evicted together. served(0) returns
// what is owed already (after a recovery).
func (c *treeCore) served(reads int) (evictPaths int) {
	c.reads += reads
	owed := c.reads / c.a
	c.reads -= owed * c.a
	return owed * c.k
}
