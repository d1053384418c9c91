package oblivistore

// The boundary between the ORAM main algorithm (Front, Fig. 5) and the
// partition groups (Group: the partition reader and the background
// shuffler of a set of partitions, Figs. 6-7). Everything that crosses it
// is one of these plain messages in an envelope naming its sender, so
// that the oblivious load balancer of Sec. VI-A can treat remote ORAM
// nodes as its partitions; in one process the core routes them in order
// (Core.route), between processes they cross sealed (wire.go). A message
// is built for the crossing and never shares memory with either side's
// state.

// Node names a machine: the Front, or a partition group by its index.
type Node int32

// FrontNode is the Front's name; a partition group's is its index.
const FrontNode Node = -1

// MsgID names a message once and for all: its sender, the sender's
// incarnation when it sent it, and the sender's sequence number for the
// receiver (from 1, never reused: a sender's state, sequence numbers
// included, is restored from its log after a restart).
type MsgID struct {
	From        Node
	Incarnation uint64
	Seq         uint64
}

// ToGroup is a message from the Front to partition group Group. Ack
// acknowledges the group's messages (Outbox); a message with ID.Seq 0
// is an acknowledgement alone, with no content, and never handed on.
type ToGroup struct {
	ID    MsgID
	Group Node
	Ack   uint64
	Msg   PartitionMsg
}

// ToFront is a message from a partition group to the Front, with an
// acknowledgement as ToGroup's.
type ToFront struct {
	ID  MsgID
	Ack uint64
	Msg FrontMsg
}

// Resend is a driver's retransmission timer turned into an entry: the
// machine sends again every message not yet acknowledged (Outbox), since
// the network may have lost it.
type Resend struct{}

// PartitionMsg is a message to a partition group; exactly one field is
// set.
type PartitionMsg struct {
	Read     *PartitionRead
	Evict    *Evict
	Blocks   *Blocks
	Progress *Progress
}

// PartitionRead is ReadPartition(P, blockid) of Fig. 6 for request Seq:
// read one slot of every readable level of partition P; when Has, the
// block of Key is in P and is to be returned. Blind: the request
// overwrites the block's value unread (kv.Mutation.Blind), so a block
// read from storage for it comes back as zeros of its length.
type PartitionRead struct {
	Seq   uint64
	P     int32
	Key   string
	Has   bool
	Blind bool
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

// Progress tells the shuffler whether requests wait on a semaphore that
// only the shuffler releases (Bypass: shuffle.go). The Front sends it to
// every group whenever that changes.
type Progress struct{ Bypass bool }

// FrontMsg is a message from a partition group; exactly one field is
// set.
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
