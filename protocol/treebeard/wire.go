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

// sealedWire is a transport that sends every message and every reply
// sealed under the store key over a network.
type sealedWire struct {
	keys *seal.Keys
	net  network
}

func (w sealedWire) stash(to int, h StashShard) StashShard {
	return wireEnd{w: w, at: Endpoint{LayerStash, to}, stash: h}
}

func (w sealedWire) pathReader(to int, h PathReader) PathReader {
	return wireEnd{w: w, at: Endpoint{LayerORAM, to}, reader: h}
}

func (w sealedWire) evictionSource(to int, h EvictionSource) EvictionSource {
	return wireEnd{w: w, at: Endpoint{LayerStash, to}, source: h}
}

func (w sealedWire) admin(to Endpoint, h Admin) Admin { return wireEnd{w: w, at: to, admin: h} }

// wireEnd is a sender's end of the sealed wire to receiver at, reached
// through the one of its handlers that is set.
type wireEnd struct {
	w      sealedWire
	at     Endpoint
	stash  StashShard
	reader PathReader
	source EvictionSource
	admin  Admin
}

func (e wireEnd) Access(m AccessMsg) AccessReply {
	return callSealed(e, m.ID, m, accessCodec, accessReplyCodec, e.stash.Access, true)
}

func (e wireEnd) ReadPaths(m ReadPathsMsg) ReadPathsReply {
	return callSealed(e, m.ID, m, readPathsCodec, readPathsReplyCodec, e.reader.ReadPaths, true)
}

func (e wireEnd) EvictionBlocks(m EvictionBlocksMsg) EvictionBlocksReply {
	return callSealed(e, m.ID, m, evictionBlocksCodec, evictionBlocksReplyCodec, e.source.EvictionBlocks, true)
}

func (e wireEnd) EvictionDone(m EvictionDoneMsg) EvictionDoneReply {
	return callSealed(e, m.ID, m, evictionDoneCodec, evictionDoneReplyCodec, e.source.EvictionDone, true)
}

// Admin: the store sends its own messages one at a time, and none
// arrives after its reply.
func (e wireEnd) Admin(m AdminMsg) AdminReply {
	return callSealed(e, m.ID, m, adminCodec, adminReplyCodec, e.admin.Admin, false)
}

// callSealed seals m, carries it to e.at, where it is opened and handled, and
// opens the sealed reply; a message or reply that does not open is
// answered as lost in transit (CodeTransport), and sent again.
func callSealed[M, R any, P reply[R]](e wireEnd, id MsgID, m M, mc wireCodec[M], rc wireCodec[R], handle func(M) R, mayBeLate bool) R {
	keys := e.w.keys
	receive := func(in Sealed) Sealed {
		msg, err := openWire(keys, mc, in, e.at)
		var r R
		if err != nil {
			r = failedWith[R, P](Status{Code: CodeTransport, Detail: err.Error()})
		} else {
			r = handle(msg)
		}
		return sealWire(keys, rc, in.ID, e.at, in.ID.Sender, r)
	}
	back, st := e.w.net.carry(sealWire(keys, mc, id, id.Sender, e.at, m), receive, mayBeLate)
	if st.Code != CodeOK {
		return failedWith[R, P](st)
	}
	if back.ID != id || back.From != e.at {
		return failedWith[R, P](Status{Code: CodeTransport,
			Detail: fmt.Sprintf("treebeard: %v refused a %v from %v: it answers %+v, not %+v", id.Sender, back.Kind, back.From, back.ID, id)})
	}
	r, err := openWire(keys, rc, back, id.Sender)
	if err != nil {
		return failedWith[R, P](Status{Code: CodeTransport, Detail: err.Error()})
	}
	return r
}
