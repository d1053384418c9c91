package oblivistore

// The boundary between the ORAM main algorithm (Front, Fig. 5) and the
// partitions (Server: the partition reader and the background shuffler,
// Figs. 6-7). Everything that crosses it is one of these plain messages,
// so that the oblivious load balancer of Sec. VI-A can later treat remote
// ORAM nodes as its partitions; in one process the core routes them
// between the two in order (Core.route). A message is built for the
// crossing and never shares memory with either side's state.

// PartitionMsg is a message to the partitions; exactly one field is set.
type PartitionMsg struct {
	Read     *PartitionRead
	Evict    *Evict
	Blocks   *Blocks
	Progress *Progress
}

// PartitionRead is ReadPartition(P, blockid) of Fig. 6 for request Seq:
// read one slot of every readable level of partition P; when Has, the
// block of Key is in P and is to be returned.
type PartitionRead struct {
	Seq uint64
	P   int32
	Key string
	Has bool
}

// Evict schedules one eviction to partition P: J_p += 1 (Fig. 5).
type Evict struct{ P int32 }

// Blocks answers a Fetch: the blocks leaving the eviction cache for
// partition P's shuffle (at most the J asked for; dummies make up the
// rest).
type Blocks struct {
	P       int32
	Entries []Entry
}

// Entry is one block crossing the boundary: its key and value.
type Entry struct {
	Key string
	Val []byte
}

// Progress lets the shuffler run. Bypass says requests wait on a
// semaphore that only the shuffler releases (shuffle.go).
type Progress struct{ Bypass bool }

// FrontMsg is a message from the partitions; exactly one field is set.
type FrontMsg struct {
	Started  *ReadStarted
	Finished *ReadFinished
	Ready    *BlockReady
	Fetch    *Fetch
}

// ReadStarted says request Seq's partition read was issued, and how many
// of its levels took no early cache-in (returned at once to the early
// cache-in semaphore, Fig. 6 step 2).
type ReadStarted struct {
	Seq      uint64
	NonEarly int64
}

// ReadFinished says request Seq's partition read completed; when Found,
// Val is the block it was asked for. A block whose slot another read
// (an early or shuffling cache-in) is still bringing follows in a
// BlockReady: the read's completion must not wait for it, since what a
// completion sets off (the request's evictions) is visible.
type ReadFinished struct {
	Seq   uint64
	Found bool
	Val   []byte
}

// BlockReady brings request Seq the block its partition read asked for,
// once the cache-in reading its slot returned.
type BlockReady struct {
	Seq uint64
	Val []byte
}

// Fetch asks for up to J blocks of partition P's eviction cache for its
// shuffle, and returns Early early cache-ins, now in the shuffling buffer,
// to the early cache-in semaphore (Fig. 7 step 3).
type Fetch struct {
	P     int32
	J     int64
	Early int64
}
