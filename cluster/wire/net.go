package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oblivkv/oblivkv/cluster"
	"github.com/oblivkv/oblivkv/cluster/rpc"
	"github.com/oblivkv/oblivkv/protocol/treebeard"
)

// DefaultTimeout bounds one attempt of a call, unless WithTimeout sets
// another bound.
const DefaultTimeout = 10 * time.Second

// Net is a process's treebeard.Network: it sends each message to the
// replica it believes leads the group serving the message's receiver.
// A replica that does not lead and names the leader is followed at once,
// once; a replica that cannot be reached, or does not know the leader,
// fails the attempt, and the next one goes to the group's next replica.
type Net struct {
	cfg     *cluster.Config
	id      string
	tls     *tls.Config
	timeout time.Duration

	mu      sync.Mutex
	closed  bool
	clients map[string]*rpc.Client // by replica id, each dialled at its first call
	leaders map[*cluster.Group]int // the replica believed to lead; the first until told otherwise
}

// Option sets an optional part of a Net.
type Option func(*Net)

// WithTimeout bounds one attempt of a call by d instead of
// DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(n *Net) { n.timeout = d } }

// NewNet returns the Net of process id of cfg. tlsCfg is its client TLS
// configuration (cluster.ClientTLS); each replica's certificate is
// checked against the replica's id, whatever ServerName tlsCfg names.
// nil is plaintext, for loopback tests and the explicit plaintext flag
// only.
func NewNet(cfg *cluster.Config, id string, tlsCfg *tls.Config, opts ...Option) *Net {
	n := &Net{cfg: cfg, id: id, tls: tlsCfg, timeout: DefaultTimeout,
		clients: map[string]*rpc.Client{}, leaders: map[*cluster.Group]int{}}
	for _, o := range opts {
		o(n)
	}
	return n
}

// Carry implements treebeard.Network: it takes m to the leader of the
// group serving m.To and returns its reply; an error is an attempt that
// failed, which the sender makes again.
func (n *Net) Carry(m treebeard.Sealed) (treebeard.Sealed, error) {
	g, err := groupOf(n.cfg, m.To)
	if err != nil {
		return treebeard.Sealed{}, err
	}
	out, err := encode(m)
	if err != nil {
		return treebeard.Sealed{}, err
	}
	i := n.leader(g)
	reply, err := n.call(g.Replicas[i], out)
	if leader, named := n.follow(g, i, err); named {
		i = leader
		reply, err = n.call(g.Replicas[i], out)
		n.follow(g, i, err)
	}
	if err != nil {
		return treebeard.Sealed{}, fmt.Errorf("wire: a %v to %v at %s: %w", m.Kind, m.To, g.Replicas[i].ID, err)
	}
	return decode(reply)
}

// leader returns the replica of g believed to lead it.
func (n *Net) leader(g *cluster.Group) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaders[g]
}

// follow learns from err, the outcome of a call to replica i of g, which
// replica leads g: the one a NotLeaderError names (true: call it now),
// or, after any other failure, the one after i.
func (n *Net) follow(g *cluster.Group, i int, err error) (leader int, named bool) {
	if err == nil {
		return i, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var nl *rpc.NotLeaderError
	if errors.As(err, &nl) {
		if leader := replicaIndex(g, nl.Leader); leader >= 0 {
			n.leaders[g] = leader
			return leader, true
		}
	}
	if n.leaders[g] == i {
		n.leaders[g] = (i + 1) % len(g.Replicas)
	}
	return i, false
}

// call makes one attempt of m at replica r.
func (n *Net) call(r cluster.Replica, m rpc.Message) (rpc.Message, error) {
	c, err := n.client(r)
	if err != nil {
		return rpc.Message{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	return c.Call(ctx, m)
}

// client returns the client of replica r, dialling it the first time.
func (n *Net) client(r cluster.Replica) (*rpc.Client, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("wire: the network is closed")
	}
	if c, ok := n.clients[r.ID]; ok {
		return c, nil
	}
	var tlsCfg *tls.Config
	if n.tls != nil {
		tlsCfg = n.tls.Clone()
		tlsCfg.ServerName = r.ID
	}
	c, err := rpc.Dial(n.id, r.ID, r.RPC, tlsCfg)
	if err != nil {
		return nil, err
	}
	n.clients[r.ID] = c
	return c, nil
}

// Close closes the connections; a call after it fails.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	var errs []error
	for _, c := range n.clients {
		errs = append(errs, c.Close())
	}
	clear(n.clients)
	return errors.Join(errs...)
}
