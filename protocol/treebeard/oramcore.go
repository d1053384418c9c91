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
// and the paths owed to eviction. The buckets themselves and their
// metadata are ringoram.Tree's, whose changes are journaled as
// ringoram.Change; the tree's machine (oramMachine) holds both, and
// treeWorker drives it.
type treeCore struct {
	shards, a, k int
	leak         leak // tests only (leak.go)

	parts     map[uint64][]int // epochs not all shards sent yet: the shards that did
	abandoned map[uint64]bool  // epochs given up before their last part came
	reads     int              // path reads since the last eviction
	evictions uint64           // evictions started: the next one's number (in TreeSnapshot)
}

func newTreeCore(shards, a, k int) *treeCore {
	return &treeCore{shards: shards, a: a, k: k, parts: map[uint64][]int{}, abandoned: map[uint64]bool{}}
}

// partOutcome is what becomes of a part of an epoch.
type partOutcome uint8

const (
	partHeld      partOutcome = iota // held until the other shards' parts come
	partComplete                     // the last part: the epoch is ready to read
	partDuplicate                    // the shard sent this epoch's part already
	partLate                         // the epoch was given up (abandon)
)

// part notes that shard sent its part of epoch (the driver holds the
// reads). Once every shard has sent its part, empty or not, it returns
// the shards, in order: the epoch is read whole, in one multi-path read
// (Treebeard Sec. 5.3.1), never split by how its keys hash to shards. A
// part sent twice is a duplicate and completes nothing; a part of an
// epoch given up is late.
func (c *treeCore) part(epoch uint64, shard int) (ready []int, outcome partOutcome) {
	if c.leak == leakEagerShardParts {
		return []int{shard}, partComplete
	}
	if c.abandoned[epoch] {
		return nil, partLate
	}
	got := c.parts[epoch]
	if slices.Contains(got, shard) {
		return nil, partDuplicate
	}
	got = append(got, shard)
	if len(got) < c.shards {
		c.parts[epoch] = got
		return nil, partHeld
	}
	delete(c.parts, epoch)
	slices.Sort(got)
	return got, partComplete
}

// abandon gives up an epoch whose parts are not all in (the driver's
// timer: a shard that never sends its part must not hold the others'
// forever). It returns the shards whose parts were held, which fail
// unread, and those that sent none; nothing of the epoch is read, and its
// parts that come later are late. An epoch read or unknown is left alone.
func (c *treeCore) abandon(epoch uint64) (held, missing []int) {
	held, ok := c.parts[epoch]
	if !ok {
		return nil, nil
	}
	delete(c.parts, epoch)
	c.abandoned[epoch] = true
	for s := range c.shards {
		if !slices.Contains(held, s) {
			missing = append(missing, s)
		}
	}
	slices.Sort(held)
	return held, missing
}

// nextEviction numbers an eviction starting: its messages carry the number.
func (c *treeCore) nextEviction() uint64 {
	c.evictions++
	return c.evictions - 1
}

// counted is the number of reads that count towards the eviction every A
// reads: all of them (leakEvictOnRealReads: only the real ones).
func (c *treeCore) counted(reads []ringoram.PathRead) int {
	if c.leak != leakEvictOnRealReads {
		return len(reads)
	}
	n := 0
	for _, r := range reads {
		if r.Real {
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
	evictPaths, c.reads = c.owes(reads)
	return evictPaths
}

// owes returns what served(reads) would, and the path reads then left
// since the last eviction, without counting the reads.
func (c *treeCore) owes(reads int) (evictPaths, left int) { return c.owesAfter(c.reads, reads) }

// owesAfter is owes once before path reads since the last eviction are
// counted: those of the operations in flight before one beside them.
func (c *treeCore) owesAfter(before, reads int) (evictPaths, left int) {
	n := before + reads
	owed := n / c.a
	return owed * c.k, n - owed*c.a
}
