package treebeard

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

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

// sealedAccess returns a Router's message to endpoint to, sealed.
func sealedAccess(keys *seal.Keys, to Endpoint, value string) Sealed {
	id := MsgID{Sender: Endpoint{LayerRouter, 0}, Incarnation: 1, Epoch: 5}
	m := AccessMsg{ID: id, Batch: []Request{{Op: OpPut, Value: []byte(value)}}}
	return sealWire(keys, accessCodec, id, id.Sender, to, m)
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
		"a trailing byte": append(bytes.Clone(b), 0),
		"version 2":       append([]byte{2}, b[1:]...),
		"kind 0":          append([]byte{wireVersion, 0}, b[2:]...),
		"kind 11":         append([]byte{wireVersion, byte(kindAdminReply) + 1}, b[2:]...),
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
