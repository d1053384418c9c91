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
// A leader the configuration in use does not know (a replica added since
// the process started) has the configuration file read again, and so
// has every move to a group's next replica.
type Net struct {
	live    *cluster.Live
	id      string
	tls     *tls.Config
	timeout time.Duration

	mu      sync.Mutex
	closed  bool
	clients map[string]dialled  // by replica id, each dialled at its first call
	leaders map[groupKey]string // the id of the replica believed to lead; the first until told otherwise
}

// Option sets an optional part of a Net.
type Option func(*Net)

// WithTimeout bounds one attempt of a call by d instead of
// DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(n *Net) { n.timeout = d } }

// NewNet returns the Net of process id of the cluster live describes
// (cluster.Static for a configuration that never reloads). tlsCfg is its
// client TLS configuration (cluster.ClientTLS); each replica's
// certificate is checked against the replica's id, whatever ServerName
// tlsCfg names. nil is plaintext, for loopback tests and the explicit
// plaintext flag only.
func NewNet(live *cluster.Live, id string, tlsCfg *tls.Config, opts ...Option) *Net {
	n := &Net{live: live, id: id, tls: tlsCfg, timeout: DefaultTimeout,
		clients: map[string]dialled{}, leaders: map[groupKey]string{}}
	for _, o := range opts {
		o(n)
	}
	return n
}

// Carry implements treebeard.Network: it takes m to the leader of the
// group serving m.To and returns its reply; an error is an attempt that
// failed, which the sender makes again.
func (n *Net) Carry(m treebeard.Sealed) (treebeard.Sealed, error) {
	cfg := n.live.Config()
	g, err := groupOf(cfg, m.To)
	if err != nil {
		return treebeard.Sealed{}, err
	}
	out, err := encode(m)
	if err != nil {
		return treebeard.Sealed{}, err
	}
	key := keyOf(cfg, m.To)
	r := n.leader(key, g)
	reply, err := n.call(r, out)
	if leader, named := n.follow(key, m.To, r.ID, err); named {
		r = leader
		reply, err = n.call(r, out)
		n.follow(key, m.To, r.ID, err)
	}
	if err != nil {
		return treebeard.Sealed{}, fmt.Errorf("wire: a %v to %v at %s: %w", m.Kind, m.To, r.ID, err)
	}
	return decode(reply)
}

// leader returns the replica of g, the group key names, believed to lead
// it.
func (n *Net) leader(key groupKey, g *cluster.Group) cluster.Replica {
	n.mu.Lock()
	defer n.mu.Unlock()
	return believed(g, n.leaders[key])
}

// believed is replica id of g, or g's first replica if g has none of
// that id.
func believed(g *cluster.Group, id string) cluster.Replica {
	if r, ok := g.Replica(id); ok {
		return r
	}
	return g.Replicas[0]
}

// follow learns from err, the outcome of a call to replica called of the
// group that serves e (key names it), which replica leads the group: the
// one a NotLeaderError names (true: call it now), or, after any other
// failure, the one after called.
func (n *Net) follow(key groupKey, e treebeard.Endpoint, called string, err error) (leader cluster.Replica, named bool) {
	if err == nil {
		return cluster.Replica{}, false
	}
	var nl *rpc.NotLeaderError
	if errors.As(err, &nl) && nl.Leader != "" {
		if r, ok := n.replica(e, nl.Leader); ok {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.leaders[key] = r.ID
			return r, true
		}
	}
	cfg, _ := n.live.Reload()
	g, err := groupOf(cfg, e)
	if err != nil {
		return cluster.Replica{}, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if believed(g, n.leaders[key]).ID == called {
		n.leaders[key] = g.Replicas[(replicaIndex(g, called)+1)%len(g.Replicas)].ID
	}
	return cluster.Replica{}, false
}

// replica returns replica id of the group serving e, reading the
// configuration file again if the one in use has none of that id.
func (n *Net) replica(e treebeard.Endpoint, id string) (cluster.Replica, bool) {
	return cluster.Find(n.live, func(c *cluster.Config) (cluster.Replica, bool) { return replicaOf(c, e, id) })
}

// replicaOf returns replica id of the group of cfg serving e.
func replicaOf(cfg *cluster.Config, e treebeard.Endpoint, id string) (cluster.Replica, bool) {
	g, err := groupOf(cfg, e)
	if err != nil {
		return cluster.Replica{}, false
	}
	return g.Replica(id)
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

// dialled is the client of a replica and the address it dials.
type dialled struct {
	*rpc.Client
	addr string
}

// client returns the client of replica r, dialling it the first time and
// again when r's address changed.
func (n *Net) client(r cluster.Replica) (*rpc.Client, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("wire: the network is closed")
	}
	if d, ok := n.clients[r.ID]; ok && d.addr == r.RPC {
		return d.Client, nil
	} else if ok { // moved: the configuration file names another address now
		d.Close()
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
	n.clients[r.ID] = dialled{Client: c, addr: r.RPC}
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
