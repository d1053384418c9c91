package treebeard

import (
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

	parts map[uint64][]int // epochs not all shards sent yet: the shards that did
	reads int              // path reads since the last eviction
}

func newTreeCore(shards, a, k int) *treeCore {
	return &treeCore{shards: shards, a: a, k: k, parts: map[uint64][]int{}}
}

// part notes that shard sent its part of epoch (the driver holds the
// reads). Once every shard has sent its part, empty or not, it returns
// the shards, in order: the epoch is read whole, in one multi-path read
// (Treebeard Sec. 5.3.1), never split by how its keys hash to shards. A
// part sent twice is reported as a duplicate and ignored.
func (c *treeCore) part(epoch uint64, shard int) (ready []int, duplicate bool) {
	if c.leak == leakEagerShardParts {
		return []int{shard}, false
	}
	got := c.parts[epoch]
	if slices.Contains(got, shard) {
		return nil, true
	}
	got = append(got, shard)
	if len(got) < c.shards {
		c.parts[epoch] = got
		return nil, false
	}
	delete(c.parts, epoch)
	slices.Sort(got)
	return got, false
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
