package treebeard

import (
	"fmt"
	"sync"

	"github.com/oblivkv/oblivkv/seal"
)

// The sealed wire: what crosses between the layers' processes. Each
// message and each reply travels as a Sealed: its kind, its message's
// MsgID, its sender and its receiver in the clear (a network needs them),
// and its body (keys' block ids, values, positions, blocks) encoded
// (wirecodec.go) and sealed under the store key, with associated data
// binding the kind, the MsgID and both ends. A network therefore sees
// which endpoint sent what kind of message to which and how long it is,
// never what it holds, and a sealed message replayed as another kind, to
// another endpoint or under another id fails to open. A message that
// does not open is refused with CodeTransport, so its sender sends it
// again, as if it had been lost.
//
// A sender's end of the wire (wireEnd) seals and carries; a Receiver
// opens, has the endpoint's handler answer, and seals the reply, so a
// process serves its endpoints with a Receiver alone. In one process a
// network hands each message to the receiving end's Receiver (carry's
// receive); between processes a Network (cluster/wire) carries each
// Sealed, encoded (AppendBinary), to the process whose Receiver serves
// its receiver, and the sender holds no handler of it.

// msgKind is what a Sealed carries.
type msgKind uint8

const (
	kindAccess msgKind = iota + 1
	kindAccessReply
	kindReadPaths
	kindReadPathsReply
	kindEvictionBlocks
	kindEvictionBlocksReply
	kindEvictionDone
	kindEvictionDoneReply
	kindAdmin
	kindAdminReply
)

var kindNames = [...]string{kindAccess: "access message", kindAccessReply: "access reply",
	kindReadPaths: "path read message", kindReadPathsReply: "path read reply",
	kindEvictionBlocks: "eviction blocks message", kindEvictionBlocksReply: "eviction blocks reply",
	kindEvictionDone: "eviction done message", kindEvictionDoneReply: "eviction done reply",
	kindAdmin: "admin message", kindAdminReply: "admin reply"}

func (k msgKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("message kind %d", k)
}

// Sealed is a message or a reply as it crosses between processes. ID is
// the message's (a reply carries the id of the message it answers); From
// and To are the endpoints it goes between (for a message, From is
// ID.Sender; for a reply, From is the message's receiver).
type Sealed struct {
	Kind     msgKind
	ID       MsgID
	From, To Endpoint
	Body     []byte
}

// plainBodies are buffers for bodies in the clear, which never leave
// sealWire and openWire (a decoded value copies what it keeps); one
// larger than maxPlainBody is left to the garbage collector.
var plainBodies = sync.Pool{New: func() any { return new([]byte) }}

const maxPlainBody = 1 << 20

func putPlainBody(buf *[]byte, body []byte) {
	if cap(body) <= maxPlainBody {
		*buf = body[:0]
		plainBodies.Put(buf)
	}
}

// sealWire encodes v with c and seals it as a Sealed from one endpoint
// to another.
func sealWire[V any](keys *seal.Keys, c wireCodec[V], id MsgID, from, to Endpoint, v V) Sealed {
	s := Sealed{Kind: c.kind, ID: id, From: from, To: to}
	buf := plainBodies.Get().(*[]byte)
	plain := c.append(append((*buf)[:0], wireVersion), v)
	s.Body = keys.Seal(nil, wireAD(s), plain)
	putPlainBody(buf, plain)
	return s
}

// openWire opens s as a value of c that endpoint at receives, and
// decodes it: a fresh value, sharing no memory with the sender's. It
// fails when s is another kind, for another endpoint, altered in any
// way, or not well formed; the error names what s claims to be.
func openWire[V any](keys *seal.Keys, c wireCodec[V], s Sealed, at Endpoint) (V, error) {
	var zero V
	if s.Kind != c.kind || s.To != at {
		return zero, fmt.Errorf("treebeard: %v refused a %v from %v to %v (id %+v): it expects a %v", at, s.Kind, s.From, s.To, s.ID, c.kind)
	}
	buf := plainBodies.Get().(*[]byte)
	plain, err := keys.Open((*buf)[:0], wireAD(s), s.Body)
	if err != nil {
		plainBodies.Put(buf)
		return zero, fmt.Errorf("treebeard: %v refused a %v from %v (id %+v): %w", at, s.Kind, s.From, s.ID, err)
	}
	v, err := c.parse(plain)
	putPlainBody(buf, plain)
	return v, err
}

// wireAD is a Sealed's associated data: a label, its kind, its id and
// both ends.
func wireAD(s Sealed) []byte {
	b := append([]byte(nil), "oblivkv treebeard wire v1"...)
	b = append(b, byte(s.Kind))
	b = appendMsgID(b, s.ID)
	b = appendEndpoint(b, s.From)
	return appendEndpoint(b, s.To)
}

// network carries Sealed messages between endpoints, as a network
// between processes would.
type network interface {
	// carry takes m to m.To, where receive answers it, and the answer
	// back; a failed Status (CodeTransport) means m or its answer was lost
	// in transit. When mayBeLate, a copy of m may reach receive after the
	// answer has come back.
	carry(m Sealed, receive func(Sealed) Sealed, mayBeLate bool) (Sealed, Status)
}

// inProcess is a network of direct calls.
type inProcess struct{}

func (inProcess) carry(m Sealed, receive func(Sealed) Sealed, _ bool) (Sealed, Status) {
	return receive(m), Status{}
}

// Network carries Sealed messages between processes (cluster/wire's Net
// is one).
type Network interface {
	// Carry takes m to the process that serves m.To and returns its
	// reply. An error means m or its reply was lost in transit: the
	// sender sends m again.
	Carry(m Sealed) (Sealed, error)
}

// between makes a Network the network of a sealedWire: every message
// crosses to another process, never to a receive function of this one.
type between struct{ Network }

func (n between) carry(m Sealed, _ func(Sealed) Sealed, _ bool) (Sealed, Status) {
	back, err := n.Carry(m)
	if err != nil {
		return Sealed{}, lost(err)
	}
	return back, Status{}
}

// lost is the Status of a message or a reply lost in transit with err.
func lost(err error) Status { return Status{Code: CodeTransport, Detail: err.Error()} }

// sealedWire is a transport that sends every message and every reply
// sealed under the store key over a network.
type sealedWire struct {
	keys *seal.Keys
	net  network
}

func (w sealedWire) stash(to int, h StashShard) StashShard {
	return w.end(Endpoint{LayerStash, to}, Handlers{StashShard: h})
}

func (w sealedWire) pathReader(to int, h PathReader) PathReader {
	return w.end(Endpoint{LayerORAM, to}, Handlers{PathReader: h})
}

func (w sealedWire) evictionSource(to int, h EvictionSource) EvictionSource {
	return w.end(Endpoint{LayerStash, to}, Handlers{EvictionSource: h})
}

func (w sealedWire) admin(to Endpoint, h Admin) Admin { return w.end(to, Handlers{Admin: h}) }

// end returns a sender's end of the wire to endpoint at. When at is in
// this process, h are its handlers, which a network of this process
// reaches through carry's receive; when at is another process's, reached
// over a Network (between), h is empty.
func (w sealedWire) end(at Endpoint, h Handlers) wireEnd {
	local := NewReceiver(w.keys)
	local.Serve(at, h)
	return wireEnd{w: w, at: at, local: local}
}

// Remote is a sender's end of the sealed wire to an endpoint of another
// process, over a Network: a StashShard, EvictionSource, PathReader and
// Admin as that endpoint serves them. Each call sends one message and
// returns its reply, or a failure with CodeTransport when the Network
// lost it (or nothing there serves it): its caller sends it again, as
// the layers' send loops do (messages.go).
type Remote struct{ wireEnd }

var _ interface {
	StashShard
	EvictionSource
	PathReader
	Admin
} = Remote{}

// NewRemote returns the end to endpoint at, over n, of messages sealed
// under keys.
func NewRemote(keys *seal.Keys, n Network, at Endpoint) Remote {
	return Remote{sealedWire{keys: keys, net: between{n}}.end(at, Handlers{})}
}

// wireEnd is a sender's end of the sealed wire to receiver at; local
// answers the messages a network hands to carry's receive.
type wireEnd struct {
	w     sealedWire
	at    Endpoint
	local *Receiver
}

func (e wireEnd) Access(m AccessMsg) AccessReply { return callSealed(e, accessCall, m.ID, m) }

func (e wireEnd) ReadPaths(m ReadPathsMsg) ReadPathsReply {
	return callSealed(e, readPathsCall, m.ID, m)
}

func (e wireEnd) EvictionBlocks(m EvictionBlocksMsg) EvictionBlocksReply {
	return callSealed(e, evictionBlocksCall, m.ID, m)
}

func (e wireEnd) EvictionDone(m EvictionDoneMsg) EvictionDoneReply {
	return callSealed(e, evictionDoneCall, m.ID, m)
}

func (e wireEnd) Admin(m AdminMsg) AdminReply { return callSealed(e, adminCall, m.ID, m) }

// callSealed seals m, carries it to e.at, where it is opened and
// handled, and opens the sealed reply; a message or reply that does not
// open, or that nothing at e.at serves, is answered as lost in transit
// (CodeTransport), and sent again.
func callSealed[H, M, R any](e wireEnd, c wireCall[H, M, R], id MsgID, m M) R {
	keys := e.w.keys
	receive := func(in Sealed) Sealed {
		out, err := e.local.Receive(in)
		if err != nil {
			return sealWire(keys, c.reply, in.ID, e.at, in.ID.Sender, c.failed(lost(err)))
		}
		return out
	}
	back, st := e.w.net.carry(sealWire(keys, c.msg, id, id.Sender, e.at, m), receive, c.mayBeLate)
	if st.Code != CodeOK {
		return c.failed(st)
	}
	if back.ID != id || back.From != e.at {
		return c.failed(Status{Code: CodeTransport,
			Detail: fmt.Sprintf("treebeard: %v refused a %v from %v: it answers %+v, not %+v", id.Sender, back.Kind, back.From, back.ID, id)})
	}
	r, err := openWire(keys, c.reply, back, id.Sender)
	if err != nil {
		return c.failed(lost(err))
	}
	return r
}

// Handlers are what an endpoint serves: a Stash shard its StashShard,
// EvictionSource and Admin; the owner of a tree its PathReader and
// Admin. A nil one is not served.
type Handlers struct {
	StashShard     StashShard
	EvictionSource EvictionSource
	PathReader     PathReader
	Admin          Admin
}

// wireCall is one kind of message and its reply: their codecs, whether a
// copy of the message may arrive after its reply (the store sends its
// own messages one at a time, and none arrives after its reply), the
// handler of an endpoint's that serves it (nil: none), its method, and
// the reply of a failure.
type wireCall[H, M, R any] struct {
	msg       wireCodec[M]
	reply     wireCodec[R]
	mayBeLate bool
	handler   func(Handlers) H
	handle    func(H, M) R
	failed    func(Status) R
}

func newCall[H, M, R any, P reply[R]](msg wireCodec[M], rep wireCodec[R], mayBeLate bool, handler func(Handlers) H, handle func(H, M) R) wireCall[H, M, R] {
	return wireCall[H, M, R]{msg: msg, reply: rep, mayBeLate: mayBeLate, handler: handler, handle: handle, failed: failedWith[R, P]}
}

// The calls between the layers.
var (
	accessCall = newCall(accessCodec, accessReplyCodec, true,
		func(h Handlers) StashShard { return h.StashShard }, StashShard.Access)
	readPathsCall = newCall(readPathsCodec, readPathsReplyCodec, true,
		func(h Handlers) PathReader { return h.PathReader }, PathReader.ReadPaths)
	evictionBlocksCall = newCall(evictionBlocksCodec, evictionBlocksReplyCodec, true,
		func(h Handlers) EvictionSource { return h.EvictionSource }, EvictionSource.EvictionBlocks)
	evictionDoneCall = newCall(evictionDoneCodec, evictionDoneReplyCodec, true,
		func(h Handlers) EvictionSource { return h.EvictionSource }, EvictionSource.EvictionDone)
	adminCall = newCall(adminCodec, adminReplyCodec, false,
		func(h Handlers) Admin { return h.Admin }, Admin.Admin)
)

// route is how a receiver answers one kind of message.
type route interface {
	kind() msgKind
	// answer opens in, has the handler of hs that serves its kind
	// handle it, and seals the reply; false when hs has none. A message
	// that does not open is answered CodeTransport.
	answer(keys *seal.Keys, hs Handlers, in Sealed) (Sealed, bool)
}

func (c wireCall[H, M, R]) kind() msgKind { return c.msg.kind }

func (c wireCall[H, M, R]) answer(keys *seal.Keys, hs Handlers, in Sealed) (Sealed, bool) {
	h := c.handler(hs)
	if any(h) == nil {
		return Sealed{}, false
	}
	var r R
	if m, err := openWire(keys, c.msg, in, in.To); err != nil {
		r = c.failed(lost(err))
	} else {
		r = c.handle(h, m)
	}
	return sealWire(keys, c.reply, in.ID, in.To, in.ID.Sender, r), true
}

// routes maps each kind of message to the wireCall that carries it.
var routes = routesOf(accessCall, readPathsCall, evictionBlocksCall, evictionDoneCall, adminCall)

func routesOf(calls ...route) map[msgKind]route {
	m := make(map[msgKind]route, len(calls))
	for _, c := range calls {
		m[c.kind()] = c
	}
	return m
}

// Receiver is the receiving half of the sealed wire in one process: it
// opens each message for the endpoint it is sent to, has the handler
// served there answer it, and seals the reply.
type Receiver struct {
	keys *seal.Keys
	mu   sync.RWMutex
	at   map[Endpoint]Handlers
}

// NewReceiver returns a Receiver that serves nothing yet, under the
// store's keys.
func NewReceiver(keys *seal.Keys) *Receiver {
	return &Receiver{keys: keys, at: map[Endpoint]Handlers{}}
}

// Serve serves h at endpoint at, in place of what was served there: a
// Stash shard its Endpoint{LayerStash, i}, the owner of tree t its
// Endpoint{LayerORAM, t}.
func (r *Receiver) Serve(at Endpoint, h Handlers) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at[at] = h
}

// Receive answers in with a sealed reply. It fails only when nothing is
// served at in.To or nothing there serves in's kind (the caller answers
// that as lost in transit); any other failure, a message that does not
// open included, is a sealed reply with a failed Status.
func (r *Receiver) Receive(in Sealed) (Sealed, error) {
	r.mu.RLock()
	h, ok := r.at[in.To]
	r.mu.RUnlock()
	if !ok {
		return Sealed{}, fmt.Errorf("treebeard: %v is not served here", in.To)
	}
	if c, known := routes[in.Kind]; known {
		if out, served := c.answer(r.keys, h, in); served {
			return out, nil
		}
	}
	return Sealed{}, fmt.Errorf("treebeard: %v serves no %v here", in.To, in.Kind)
}
