package treebeard

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// FaultNet is an in-memory network between the layers that loses,
// copies, delays and reorders messages and cuts layers off, at the rates
// of its Faults. Every message and every reply crosses it sealed
// (wire.go), as between processes, so only plain values get through, no
// memory is shared between sender and receiver, and the net sees what a
// real one would: the Sealed envelopes. An altered message or reply
// (Tamper) is refused by the wire and sent again, never handled. A copy
// of a message may arrive late, after its sender has the reply and has
// released it (the msgTable of a Stash shard or a tree): the
// receiver must answer it with the stored reply or refuse it, never
// handle it again. The store's own messages (Admin), which it sends one
// at a time, are never delivered late.
type FaultNet struct {
	faults Faults
	late   sync.WaitGroup // late copies on their way

	mu       sync.Mutex
	rng      *rand.Rand
	cut      map[Layer]bool
	isolated map[Endpoint]bool
	arrivals map[Endpoint]chan struct{} // closed at the next delivery to the endpoint
	stats    FaultStats
}

// Faults are a FaultNet's rates: each a probability per message, but
// MaxDelay, which bounds the random wait of each message and each reply.
type Faults struct {
	DropRequest float64 // the message is lost: the receiver never sees it
	DropReply   float64 // the receiver handles it, and the reply is lost
	Duplicate   float64 // the receiver gets two copies
	Reorder     float64 // the message waits until the next one to its receiver has passed
	Late        float64 // one more copy arrives after the reply, up to 4 MaxDelays later
	Tamper      float64 // the message arrives altered (a bit of it flipped, or addressed to another endpoint), or its reply does
	MaxDelay    time.Duration
}

// FaultStats counts what a FaultNet did.
type FaultStats struct {
	Messages, DroppedRequests, DroppedReplies, Duplicated, Reordered, Late, Tampered, Cut int
}

// NewFaultNet returns a FaultNet with faults f, its choices drawn from seed.
func NewFaultNet(f Faults, seed uint64) *FaultNet {
	return &FaultNet{faults: f, rng: rand.New(rand.NewPCG(seed, 0)),
		cut: map[Layer]bool{}, isolated: map[Endpoint]bool{}, arrivals: map[Endpoint]chan struct{}{}}
}

// Cut cuts layer l off: every message to or from it is lost until Heal.
func (n *FaultNet) Cut(l Layer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[l] = true
}

// Isolate cuts endpoint e off: every message to or from it is lost until
// Heal.
func (n *FaultNet) Isolate(e Endpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isolated[e] = true
}

// Heal ends every cut.
func (n *FaultNet) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	clear(n.isolated)
}

// Settle waits until every late copy has arrived.
func (n *FaultNet) Settle() { n.late.Wait() }

// Stats returns what the net did so far.
func (n *FaultNet) Stats() FaultStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// carry takes m to its receiver and its reply back, with the net's
// faults; a copy of m may arrive late if mayBeLate.
func (n *FaultNet) carry(m Sealed, receive func(Sealed) Sealed, mayBeLate bool) (Sealed, Status) {
	if n.isCut(m.From, m.To) {
		n.sleep(n.faults.MaxDelay)
		return Sealed{}, Status{Code: CodeTransport, Detail: fmt.Sprintf("%v is cut off from %v", m.From, m.To)}
	}
	n.wait(m.To)
	copies := 1
	if n.chance(n.faults.Duplicate, &n.stats.Duplicated) {
		copies = 2
	}
	if n.chance(n.faults.DropRequest, &n.stats.DroppedRequests) {
		copies--
	}
	replies := make([]Sealed, copies)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() { replies[i] = receive(n.tamper(m)) })
	}
	wg.Wait()
	n.arrived(m.To)
	if copies > 0 && mayBeLate && n.chance(n.faults.Late, &n.stats.Late) {
		n.late.Go(func() {
			n.sleep(4 * n.faults.MaxDelay)
			receive(m)
		})
	}
	if copies == 0 {
		return Sealed{}, Status{Code: CodeTransport, Detail: fmt.Sprintf("a message from %v to %v was lost", m.From, m.To)}
	}
	if n.chance(n.faults.DropReply, &n.stats.DroppedReplies) {
		return Sealed{}, Status{Code: CodeTransport, Detail: fmt.Sprintf("a reply from %v to %v was lost", m.To, m.From)}
	}
	n.sleep(n.faults.MaxDelay)
	return n.tamper(replies[len(replies)-1]), Status{}
}

// tamper returns s, or at the Tamper rate s altered: a bit of its body
// flipped, or its receiver changed (the sealed wire must refuse either).
func (n *FaultNet) tamper(s Sealed) Sealed {
	if !n.chance(n.faults.Tamper, &n.stats.Tampered) {
		return s
	}
	n.mu.Lock()
	redirect := n.rng.IntN(2) == 0
	n.mu.Unlock()
	if redirect {
		s.To.Index++
		return s
	}
	return flipped(s)
}

func (n *FaultNet) isCut(from, to Endpoint) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stats.Messages++
	if n.cut[from.Layer] || n.cut[to.Layer] || n.isolated[from] || n.isolated[to] {
		n.stats.Cut++
		return true
	}
	return false
}

// chance draws an event of probability p, counting it in count.
func (n *FaultNet) chance(p float64, count *int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p > 0 && n.rng.Float64() < p {
		*count++
		return true
	}
	return false
}

// sleep waits a random time up to most.
func (n *FaultNet) sleep(most time.Duration) {
	if most <= 0 {
		return
	}
	n.mu.Lock()
	d := time.Duration(n.rng.Int64N(int64(most) + 1))
	n.mu.Unlock()
	time.Sleep(d)
}

// wait delays a message to to: a random time, and with the Reorder rate
// until the next message to to has passed (at most a few MaxDelays).
func (n *FaultNet) wait(to Endpoint) {
	n.sleep(n.faults.MaxDelay)
	if !n.chance(n.faults.Reorder, &n.stats.Reordered) {
		return
	}
	n.mu.Lock()
	next, ok := n.arrivals[to]
	if !ok {
		next = make(chan struct{})
		n.arrivals[to] = next
	}
	n.mu.Unlock()
	select {
	case <-next:
	case <-time.After(4*n.faults.MaxDelay + time.Millisecond):
	}
}

// arrived notes a delivery to to, releasing the messages held behind it.
func (n *FaultNet) arrived(to Endpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if next, ok := n.arrivals[to]; ok {
		close(next)
		delete(n.arrivals, to)
	}
}
