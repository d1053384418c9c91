package treebeard

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/seal"
)

// crossed is s after it crossed a network between processes: encoded to
// bytes and decoded again.
func crossed(s Sealed) (Sealed, error) {
	b, err := s.MarshalBinary()
	if err != nil {
		return Sealed{}, err
	}
	return UnmarshalSealed(b)
}

// bytesNet is a network on which every message and every reply crosses
// as bytes, the message to the receiving end's Receiver; it counts the
// messages of each kind, and the Sealed that did not decode.
type bytesNet struct {
	mu       sync.Mutex
	kinds    map[msgKind]int
	undecode []error
}

func (n *bytesNet) carry(m Sealed, receive func(Sealed) Sealed, _ bool) (Sealed, Status) {
	in, err := n.cross(m)
	if err != nil {
		return Sealed{}, lost(err)
	}
	back, err := n.cross(receive(in))
	if err != nil {
		return Sealed{}, lost(err)
	}
	return back, Status{}
}

func (n *bytesNet) cross(s Sealed) (Sealed, error) {
	out, err := crossed(s)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kinds[s.Kind]++
	if err != nil {
		n.undecode = append(n.undecode, err)
	}
	return out, err
}

// TestRemoteLinearizable: a store whose every message and reply crosses
// as bytes, each message answered by a Receiver, is linearizable
// (checkLinearizableOn), and every kind of message crossed.
func TestRemoteLinearizable(t *testing.T) {
	net := &bytesNet{kinds: map[msgKind]int{}}
	s := checkLinearizableOn(t, TestingKnobs{Transport: net})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	net.mu.Lock()
	defer net.mu.Unlock()
	if len(net.undecode) > 0 {
		t.Fatalf("%d sealed messages did not decode, the first: %v", len(net.undecode), net.undecode[0])
	}
	for kind := kindAccess; kind <= kindAdminReply; kind++ {
		if net.kinds[kind] == 0 {
			t.Errorf("no %v crossed (%v)", kind, net.kinds)
		}
	}
}

// sealedAccess returns a Router's message to endpoint to, sealed.
func sealedAccess(keys *seal.Keys, to Endpoint, value string) Sealed {
	id := MsgID{Sender: Endpoint{LayerRouter, 0}, Incarnation: 1, Epoch: 5}
	m := AccessMsg{ID: id, Batch: []Request{{Op: OpPut, Value: []byte(value)}}}
	return sealWire(keys, accessCodec, id, id.Sender, to, m)
}

// echoShard answers a batch with the value of its first request, and
// counts the batches it handled.
func echoShard(handled *int) StashShard {
	return stashFunc(func(m AccessMsg) AccessReply {
		*handled++
		return AccessReply{Replies: []Reply{{Result: kv.Result{Found: true, Old: m.Batch[0].Value}}}}
	})
}

// TestReceiverRefuses: a Receiver answers a message for an endpoint it
// serves with the handler's sealed reply; it refuses, with an error, a
// message for an endpoint it does not serve and a kind nothing serves
// there; and it answers a message whose body was altered in transit with
// CodeTransport, without handling it.
func TestReceiverRefuses(t *testing.T) {
	keys, handled := kvtest.NewKeys(t), 0
	at := Endpoint{LayerStash, 1}
	r := NewReceiver(keys)
	r.Serve(at, Handlers{StashShard: echoShard(&handled)})
	m := sealedAccess(keys, at, "v")
	if got := receivedAccess(t, r, m); got.Code != CodeOK || string(got.Replies[0].Old) != "v" || handled != 1 {
		t.Fatalf("a message for the served endpoint answered %+v, handled %d times", got, handled)
	}
	blocks := sealWire(keys, evictionBlocksCodec, m.ID, m.From, at, EvictionBlocksMsg{ID: m.ID})
	for _, tc := range []struct {
		name string
		in   Sealed
		want string
	}{
		{"for another endpoint", sealedAccess(keys, Endpoint{LayerStash, 0}, "v"), "stash 0 is not served here"},
		{"of a kind not served there", blocks, "stash 1 serves no eviction blocks message"},
		{"a reply", sealWire(keys, accessReplyCodec, m.ID, m.From, at, AccessReply{}), "stash 1 serves no access reply"},
	} {
		if out, err := r.Receive(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Receive = %+v, %v; want an error saying %q", tc.name, out, err, tc.want)
		}
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1 // the last byte of the sealed body
	altered, err := UnmarshalSealed(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := receivedAccess(t, r, altered); got.Code != CodeTransport || !strings.Contains(got.Detail, "failed authentication") {
		t.Fatalf("an altered message answered %+v; want CodeTransport", got.Status)
	}
	if handled != 1 {
		t.Fatalf("the shard handled %d messages, want 1", handled)
	}
}

// receivedAccess has r receive in, an access message, and opens the reply.
func receivedAccess(t *testing.T, r *Receiver, in Sealed) AccessReply {
	t.Helper()
	out, err := r.Receive(in)
	if err != nil {
		t.Fatal(err)
	}
	if out.From != in.To || out.To != in.ID.Sender || out.ID != in.ID {
		t.Fatalf("the reply to %+v goes from %v to %v under %+v", in.ID, out.From, out.To, out.ID)
	}
	rep, err := openWire(r.keys, accessReplyCodec, out, in.ID.Sender)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// loopback is a Network to the Receiver of another process, every
// message and reply crossing as bytes; err, when set, loses them all.
type loopback struct {
	to  *Receiver
	err error
}

func (l loopback) Carry(m Sealed) (Sealed, error) {
	if l.err != nil {
		return Sealed{}, l.err
	}
	in, err := crossed(m)
	if err != nil {
		return Sealed{}, err
	}
	out, err := l.to.Receive(in)
	if err != nil {
		return Sealed{}, err
	}
	return crossed(out)
}

// TestRemoteEnd: a sender's end that holds no handler of its receiver
// (Remote) reaches it over a Network; a message the Network loses, or one nothing
// serves on the far side, is answered as lost in transit, saying why.
func TestRemoteEnd(t *testing.T) {
	keys, handled := kvtest.NewKeys(t), 0
	at := Endpoint{LayerStash, 2}
	far := NewReceiver(keys)
	far.Serve(at, Handlers{StashShard: echoShard(&handled)})
	m := AccessMsg{ID: MsgID{Sender: Endpoint{LayerRouter, 1}, Epoch: 3}, Batch: []Request{{Value: []byte("far")}}}
	for _, tc := range []struct {
		name string
		net  loopback
		to   Endpoint
		want Status
	}{
		{"served", loopback{to: far}, at, Status{}},
		{"lost", loopback{to: far, err: errors.New("connection refused")}, at, Status{Code: CodeTransport, Detail: "connection refused"}},
		{"not served", loopback{to: far}, Endpoint{LayerStash, 0}, Status{Code: CodeTransport, Detail: "treebeard: stash 0 is not served here"}},
	} {
		rep := NewRemote(keys, tc.net, tc.to).Access(m)
		if rep.Status != tc.want {
			t.Errorf("%s: the reply's status is %+v, want %+v", tc.name, rep.Status, tc.want)
		}
		if tc.want.Code == CodeOK && string(rep.Replies[0].Old) != "far" {
			t.Errorf("%s: the reply is %+v", tc.name, rep)
		}
	}
	if handled != 1 {
		t.Fatalf("the far shard handled %d messages, want 1", handled)
	}
}

// TestSealedBinary: a Sealed decodes to itself, and every cut of its
// encoding, a byte more, another version and an unknown kind fail.
func TestSealedBinary(t *testing.T) {
	s := sealedAccess(kvtest.NewKeys(t), Endpoint{LayerStash, 3}, "value")
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := UnmarshalSealed(b); err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("decoded as %+v, %v; want %+v", got, err, s)
	}
	for n := range len(b) {
		if _, err := UnmarshalSealed(b[:n]); err == nil {
			t.Fatalf("cut to %d of %d bytes, it decoded", n, len(b))
		}
	}
	for name, bad := range map[string][]byte{
		"a trailing byte":  append(bytes.Clone(b), 0),
		"the next version": append([]byte{wireVersion + 1}, b[1:]...),
		"kind 0":           append([]byte{wireVersion, 0}, b[2:]...),
		"kind 11":          append([]byte{wireVersion, byte(kindAdminReply) + 1}, b[2:]...),
	} {
		if _, err := UnmarshalSealed(bad); err == nil {
			t.Errorf("with %s, it decoded", name)
		}
	}
}

// FuzzUnmarshalSealed: any bytes fail to decode cleanly, or decode to a
// Sealed that encodes and decodes back to itself.
func FuzzUnmarshalSealed(f *testing.F) {
	keys, err := seal.NewKeys(bytes.Repeat([]byte{3}, seal.MasterKeySize))
	if err != nil {
		f.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 5))
	for range 3 {
		var m AdminMsg
		randomFill(rng, reflect.ValueOf(&m).Elem())
		b, _ := sealWire(keys, adminCodec, m.ID, m.ID.Sender, Endpoint{LayerORAM, 7}, m).MarshalBinary()
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{wireVersion, byte(kindAccess), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{wireVersion, byte(kindAccess), 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := UnmarshalSealed(b)
		if err != nil {
			return
		}
		again, err := crossed(s)
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("%x decoded as %+v, which crosses as %+v, %v", b, s, again, err)
		}
	})
}
