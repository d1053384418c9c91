package treebeard

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
)

// The messages between layers are plain values (no pointer, channel or Go
// error in them), so a network can carry them: each has a binary encoding
// (wirecodec.go) and crosses sealed under the store key on the sealed
// wire (wire.go), which the fault-injecting network of the tests and
// TestingKnobs.Wire use. Every message has a MsgID and every call ends
// with a reply, a transport failure included (CodeTransport): the sender
// then sends the same message again, and the receiver recognises the
// copy by its MsgID and answers it with the first copy's reply (the
// msgTable in the state of each Stash shard and each tree), so a lost or duplicated
// message never runs twice (a path read handled twice would read a real
// path twice).

// Layer is one of Treebeard's three layers of trusted processes.
type Layer uint8

// The layers.
const (
	LayerRouter Layer = iota
	LayerStash
	LayerORAM  // an ORAM shard, addressed by the tree it owns
	LayerStore // the store itself: loads, checkpoints, restores, stats (AdminMsg)
)

func (l Layer) String() string {
	switch l {
	case LayerRouter:
		return "router"
	case LayerStash:
		return "stash"
	case LayerStore:
		return "store"
	}
	return "oram"
}

// Endpoint is one process of a layer: a Router, a Stash shard, or the
// owner of a tree (Index is the tree).
type Endpoint struct {
	Layer Layer
	Index int
}

func (e Endpoint) String() string { return fmt.Sprintf("%v %d", e.Layer, e.Index) }

// MsgID names a message: its sender, the sender's incarnation (the
// store's, which grows at every open and survives restarts: incarnation.go),
// the epoch it belongs to (for an eviction's messages, the tree's eviction
// number; for the store's own, its admin sequence) and its sequence number
// among the sender's messages of that epoch (the receiver's index). A
// message sent again carries the same MsgID; no two messages of one sender
// carry the same MsgID, across restarts included, since epochs, eviction
// numbers and admin sequences restart only with a new incarnation.
type MsgID struct {
	Sender      Endpoint
	Incarnation uint64
	Epoch       uint64
	Seq         uint64
}

// RequestID names a client request: the Router that took it in, the
// Router's incarnation, and its number among that Router's requests of
// the incarnation. A Stash shard applies a request once, however many
// batches carry it, and answers every later copy with the stored reply
// (stashCore.plan).
type RequestID struct {
	Router      int
	Incarnation uint64
	Seq         uint64
}

// AccessMsg is a Router's batch of one epoch for one Stash shard.
type AccessMsg struct {
	ID      MsgID
	Batch   []Request
	Release []MsgID // earlier messages to this shard whose replies arrived
}

// AccessReply answers an AccessMsg: a reply per request, in order.
type AccessReply struct {
	Replies []Reply
	Status
}

// ReadPathsMsg is a Stash shard's part of an epoch for one tree: one path
// read per entry, real or fake.
type ReadPathsMsg struct {
	ID      MsgID // its sender is the Stash shard
	Tree    int
	Reads   []ringoram.PathRead
	Release []MsgID
}

// ReadPathsReply answers a ReadPathsMsg: the wanted blocks, in order.
type ReadPathsReply struct {
	Results []ringoram.ReadResult
	Status
}

// EvictionBlocksMsg asks a Stash shard for the blocks of an eviction of
// the tree that sends it (ID.Sender.Index; ID.Epoch is the eviction's
// number).
type EvictionBlocksMsg struct {
	ID      MsgID
	Release []MsgID
}

// EvictionBlocksReply hands a tree's blocks to its eviction.
type EvictionBlocksReply struct {
	Blocks []ringoram.Block
	Status
}

// EvictionDoneMsg reports where an eviction of the tree that sends it
// placed each handed-over block: its bucket, or -1 (nack).
type EvictionDoneMsg struct {
	ID      MsgID
	Blocks  []ringoram.Block
	Placed  []int64
	Release []MsgID
}

// EvictionDoneReply names the copies the eviction placed that are stale.
type EvictionDoneReply struct {
	Stale []Stale
	Status
}

// AdminOp is what an AdminMsg asks of a layer.
type AdminOp uint8

// The admin operations. Each is idempotent: a copy does the same again,
// after the first (a layer handles its admin messages one at a time).
const (
	AdminState   AdminOp = iota // a Stash shard's blocks, or a tree's trusted state
	AdminInstall                // a Stash shard takes Blocks in place of its own
	AdminInit                   // a tree writes all its buckets afresh, holding Placed
	AdminRestore                // a tree takes State as its trusted state
	AdminStats                  // the layer's counters
	AdminNames                  // a Stash shard's positions and keys' names (Blocks.Pos, Blocks.Names)
)

// AdminMsg is the store's message to a layer outside epochs (Admin): bulk
// loads, checkpoints, restores and stats go through it. Tree names the
// tree of an ORAM shard's operation.
type AdminMsg struct {
	ID     MsgID
	Op     AdminOp
	Tree   int
	Blocks ShardBlocks
	Placed [][]ringoram.Block // by bucket
	State  TreeSnapshot
}

// AdminReply answers an AdminMsg.
type AdminReply struct {
	Blocks ShardBlocks
	State  TreeSnapshot
	Stats  LayerStats
	Status
}

// ShardBlocks are blocks of Stash shards as loads, checkpoints and
// restores move them: where each is, what the stashed ones hold, and the
// name of each whose key a Stash shard was told (a key an earlier build
// stored has none).
type ShardBlocks struct {
	Pos   map[tree.BlockID]Position
	Stash map[tree.BlockID][]byte
	Names map[tree.BlockID]string
}

// TreeSnapshot is a tree's trusted state as a checkpoint holds it.
type TreeSnapshot struct {
	Tree      ringoram.TreeState
	Reads     int    // path reads since the tree's last eviction
	Evictions uint64 // evictions the tree started: the next one's number, in its messages' ids
}

// LayerStats are a layer's counters: a Stash shard's or a tree's fields.
type LayerStats struct {
	StashSize, StashMax             int
	RealReads, FakeReads, StashHits uint64
	Tree                            ringoram.Stats
	ReadErrors, EvictionErrors      uint64
	Copies                          uint64 // copies of messages answered from the record
	Held                            int    // replies kept for their senders
}

// add adds o's counters to s, and keeps the larger StashMax.
func (s *LayerStats) add(o LayerStats) {
	s.StashSize += o.StashSize
	s.StashMax = max(s.StashMax, o.StashMax)
	s.RealReads, s.FakeReads, s.StashHits = s.RealReads+o.RealReads, s.FakeReads+o.FakeReads, s.StashHits+o.StashHits
	s.Tree.Add(o.Tree)
	s.ReadErrors, s.EvictionErrors = s.ReadErrors+o.ReadErrors, s.EvictionErrors+o.EvictionErrors
	s.Copies, s.Held = s.Copies+o.Copies, s.Held+o.Held
}

// unknownAdmin answers an AdminOp the layer does not run.
func unknownAdmin(layer Layer, op AdminOp) AdminReply {
	return AdminReply{Status: Status{Code: CodeUnavailable, Detail: fmt.Sprintf("treebeard: a %v has no admin operation %d", layer, op)}}
}

// Every reply embeds a Status.
func (s Status) status() Status { return s }

func (s *Status) set(st Status) { *s = st }

// reply is a pointer to a reply type R (a Status embedded).
type reply[R any] interface {
	*R
	status() Status
	set(Status)
}

// Resending a message lost in transit starts after minResend and doubles
// up to maxResend.
const (
	minResend = time.Millisecond
	maxResend = 100 * time.Millisecond
)

// netState is what a store's senders share: the store's incarnation,
// which their MsgIDs carry, the signal that the store is closing, which
// ends resends, and their count.
type netState struct {
	incarnation atomic.Uint64
	closing     chan struct{}
	close       sync.Once
	resent      atomic.Uint64
}

// msgID names sender's message seq of epoch in the store's incarnation.
func (n *netState) msgID(sender Endpoint, epoch, seq uint64) MsgID {
	return MsgID{Sender: sender, Incarnation: n.incarnation.Load(), Epoch: epoch, Seq: seq}
}

func newNetState() *netState { return &netState{closing: make(chan struct{})} }

// stop ends resends: the store is closing.
func (n *netState) stop() { n.close.Do(func() { close(n.closing) }) }

// send calls deliver until it returns a reply that is not a transport
// failure, sending the same message (same MsgID) each time; once the
// store is closing, a lost message is not sent again and the call fails
// with CodeUnavailable, its outcome unknown.
func send[R any, P reply[R]](net *netState, deliver func() R) R {
	wait := minResend
	for {
		r := deliver()
		st := P(&r).status()
		if st.Code != CodeTransport {
			return r
		}
		select {
		case <-net.closing:
			return failedWith[R, P](Status{Code: CodeUnavailable,
				Detail: "treebeard: the store closed while a message was resent after " + st.Detail + "; its outcome is unknown"})
		case <-time.After(wait):
		}
		net.resent.Add(1)
		wait = min(2*wait, maxResend)
	}
}

// failedWith returns a reply of type R carrying st and nothing else.
func failedWith[R any, P reply[R]](st Status) R {
	var r R
	P(&r).set(st)
	return r
}

// exchange sends receiver to the message call builds, with the MsgIDs
// whose replies the sender got since its last message there (the
// receiver releases their records), again while it is lost in transit (send); the
// message's own id is then released by the next one.
func exchange[R any, P reply[R]](net *netState, rel *releases, to int, id MsgID, call func(release []MsgID) R) R {
	r := sendReleasing[R, P](net, rel, to, call)
	rel.add(to, id) // any reply: the message is not sent again
	return r
}

// sendReleasing sends receiver to the message call builds, with the
// MsgIDs released since the sender's last message there, again while it
// is lost in transit (send); the sender releases the message's own id
// when it no longer needs the receiver's record of it.
func sendReleasing[R any, P reply[R]](net *netState, rel *releases, to int, call func(release []MsgID) R) R {
	release := rel.take(to)
	return send[R, P](net, func() R { return call(release) })
}

// releases collects, per receiver, the messages whose replies a sender
// got, for its next message there to release (msgTable, answered).
type releases struct {
	mu sync.Mutex
	to map[int][]MsgID
}

func (r *releases) add(to int, id MsgID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.to == nil {
		r.to = map[int][]MsgID{}
	}
	r.to[to] = append(r.to[to], id)
}

func (r *releases) take(to int) []MsgID {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.to[to]
	delete(r.to, to)
	return ids
}

// transport carries the layers' messages: each method returns what a
// sender calls to reach receiver h, the endpoint numbered to of its
// layer (Stash shard, or tree). In one process that is h itself
// (directCall); on the sealed wire (wire.go) every message and reply is
// sealed, over direct calls or over a network that may lose, copy, delay
// and reorder them and cut layers off (the tests' FaultNet).
type transport interface {
	stash(to int, h StashShard) StashShard
	pathReader(to int, h PathReader) PathReader
	evictionSource(to int, h EvictionSource) EvictionSource
	admin(to Endpoint, h Admin) Admin
}

type directCall struct{}

func (directCall) stash(_ int, h StashShard) StashShard                  { return h }
func (directCall) pathReader(_ int, h PathReader) PathReader             { return h }
func (directCall) evictionSource(_ int, h EvictionSource) EvictionSource { return h }
func (directCall) admin(_ Endpoint, h Admin) Admin                       { return h }
