package treebeard

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
	"github.com/oblivkv/oblivkv/protocol/ringoram"
	"github.com/oblivkv/oblivkv/protocol/tree"
	"github.com/oblivkv/oblivkv/seal"
)

// randomFill sets every field of v, recursively, to a random value of
// its type: enumerations within their range, nil or empty byte strings
// sometimes, empty slices and maps as nil (as they decode). A field added
// to a message is filled too, so a codec that forgets it fails the round
// trip.
func randomFill(rng *rand.Rand, v reflect.Value) {
	switch v.Type() {
	case reflect.TypeFor[Layer]():
		v.SetUint(rng.Uint64N(uint64(LayerStore) + 1))
		return
	case reflect.TypeFor[Code]():
		v.SetUint(rng.Uint64N(uint64(CodeFenced) + 1))
		return
	case reflect.TypeFor[Op]():
		v.SetUint(rng.Uint64N(uint64(kv.MutAppend) + 1))
		return
	case reflect.TypeFor[kv.Condition]():
		v.SetUint(rng.Uint64N(uint64(kv.IfExists) + 1))
		return
	case reflect.TypeFor[AdminOp]():
		v.SetUint(rng.Uint64N(uint64(AdminStats) + 1))
		return
	case reflect.TypeFor[[]byte]():
		if rng.IntN(4) > 0 {
			b := make([]byte, rng.IntN(6))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			v.SetBytes(b)
		}
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 1)
	case reflect.Int, reflect.Int64:
		v.SetInt(randomInt(rng))
	case reflect.Uint8:
		v.SetUint(uint64(rng.Uint32() & 0xff))
	case reflect.Uint64:
		v.SetUint(uint64(randomInt(rng)))
	case reflect.String:
		v.SetString(fmt.Sprint("detail ", rng.Uint32()))
	case reflect.Array:
		for i := range v.Len() {
			randomFill(rng, v.Index(i))
		}
	case reflect.Slice:
		if n := rng.IntN(4); n > 0 {
			v.Set(reflect.MakeSlice(v.Type(), n, n))
			for i := range n {
				randomFill(rng, v.Index(i))
			}
		}
	case reflect.Map:
		if n := rng.IntN(4); n > 0 {
			v.Set(reflect.MakeMap(v.Type()))
			for range n {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				randomFill(rng, k)
				randomFill(rng, e)
				v.SetMapIndex(k, e)
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			randomFill(rng, v.Field(i))
		}
	default:
		panic(fmt.Sprintf("randomFill: a %v in a message", v.Type()))
	}
}

// randomInt returns a small, a large or a negative number.
func randomInt(rng *rand.Rand) int64 {
	switch rng.IntN(3) {
	case 0:
		return rng.Int64N(300)
	case 1:
		return int64(rng.Uint64())
	}
	return -rng.Int64N(1 << 40)
}

// codecCase is one message or reply type: its codec's checks, run on a
// random value of it.
type codecCase struct {
	name       string
	roundTrip  func(t *testing.T, rng *rand.Rand)
	parseBytes func(b []byte) (any, []byte, error) // decoded, encoded again
}

func caseOf[V any](name string, c wireCodec[V]) codecCase {
	return codecCase{name: name,
		roundTrip: func(t *testing.T, rng *rand.Rand) { checkRoundTrip(t, rng, c) },
		parseBytes: func(b []byte) (any, []byte, error) {
			v, err := c.parse(b)
			return v, c.encode(v), err
		}}
}

var codecCases = []codecCase{
	caseOf("AccessMsg", accessCodec), caseOf("AccessReply", accessReplyCodec),
	caseOf("ReadPathsMsg", readPathsCodec), caseOf("ReadPathsReply", readPathsReplyCodec),
	caseOf("EvictionBlocksMsg", evictionBlocksCodec), caseOf("EvictionBlocksReply", evictionBlocksReplyCodec),
	caseOf("EvictionDoneMsg", evictionDoneCodec), caseOf("EvictionDoneReply", evictionDoneReplyCodec),
	caseOf("AdminMsg", adminCodec), caseOf("AdminReply", adminReplyCodec),
}

// checkRoundTrip: a random value decodes to itself, encodes to the same
// bytes every time, and every cut of its body, a byte more, and another
// version fail to decode.
func checkRoundTrip[V any](t *testing.T, rng *rand.Rand, c wireCodec[V]) {
	t.Helper()
	var v V
	randomFill(rng, reflect.ValueOf(&v).Elem())
	b := c.encode(v)
	got, err := c.parse(b)
	if err != nil {
		t.Fatalf("%v %+v: %v", c.kind, v, err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("%v decoded as\n%+v\nwant\n%+v", c.kind, got, v)
	}
	if again := c.encode(got); !bytes.Equal(again, b) {
		t.Fatalf("%v encodes to other bytes once decoded", c.kind)
	}
	for n := range len(b) {
		if _, err := c.parse(b[:n]); err == nil {
			t.Fatalf("%v cut to %d of %d bytes decoded", c.kind, n, len(b))
		}
	}
	if _, err := c.parse(append(bytes.Clone(b), 0)); err == nil {
		t.Fatalf("%v with a trailing byte decoded", c.kind)
	}
	other := bytes.Clone(b)
	other[0]++
	if _, err := c.parse(other); err == nil {
		t.Fatalf("%v of wire version %d decoded", c.kind, other[0])
	}
}

// FuzzWireCodec: every message and reply survives its codec (checkRoundTrip),
// for random values drawn from the fuzzer's seed.
func FuzzWireCodec(f *testing.F) {
	for seed := range uint64(24) {
		f.Add(seed, seed*7919)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		rng := rand.New(rand.NewPCG(a, b))
		for _, c := range codecCases {
			c.roundTrip(t, rng)
		}
	})
}

// FuzzWireDecode: any bytes given to any decoder fail cleanly or decode
// to a value that encodes and decodes back to itself.
func FuzzWireDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3 {
		var m AccessMsg
		randomFill(rng, reflect.ValueOf(&m).Elem())
		f.Add(accessCodec.encode(m))
		var r AdminReply
		randomFill(rng, reflect.ValueOf(&r).Elem())
		f.Add(adminReplyCodec.encode(r))
	}
	f.Add([]byte{wireVersion, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{wireVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range codecCases {
			v, again, err := c.parseBytes(b)
			if err != nil {
				continue
			}
			w, _, err := c.parseBytes(again)
			if err != nil || !reflect.DeepEqual(v, w) {
				t.Fatalf("%s: %x decoded as %+v, which encodes to %x, which decodes as %+v, %v", c.name, b, v, again, w, err)
			}
		}
	})
}

// TestSealedRefused: a sealed message opens only as the kind it was
// sealed as, at the endpoint it was sealed for, under the id it was sealed
// with, unaltered and under the store key; anything else is refused with
// an error that says who refused what.
func TestSealedRefused(t *testing.T) {
	keys := kvtest.NewKeys(t)
	id := MsgID{Sender: Endpoint{LayerRouter, 0}, Incarnation: 3, Epoch: 9, Seq: 1}
	to := Endpoint{LayerStash, 1}
	m := AccessMsg{ID: id, Batch: []Request{{Op: OpPut, ID: tree.BlockID{7}, Value: []byte("secret value")}}}
	s := sealWire(keys, accessCodec, id, id.Sender, to, m)
	if got, err := openWire(keys, accessCodec, s, to); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("the sealed message opened as %+v, %v", got, err)
	}
	if bytes.Contains(s.Body, []byte("secret value")) {
		t.Fatal("a sealed message shows its value")
	}
	otherKeys, err := seal.NewKeys(bytes.Repeat([]byte{9}, seal.MasterKeySize))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		open func() error
		want string
	}{
		{"a bit flipped", func() error { return openAccess(keys, flipped(s), to) }, "failed authentication"},
		{"to another shard", func() error {
			c := s
			c.To = Endpoint{LayerStash, 0}
			return openAccess(keys, c, c.To)
		}, "failed authentication"},
		{"at another shard", func() error { return openAccess(keys, s, Endpoint{LayerStash, 0}) }, "stash 0 refused"},
		{"under another id", func() error {
			c := s
			c.ID.Epoch++
			return openAccess(keys, c, to)
		}, "failed authentication"},
		{"from another sender", func() error {
			c := s
			c.From = Endpoint{LayerRouter, 1}
			return openAccess(keys, c, to)
		}, "failed authentication"},
		{"as another kind", func() error {
			c := s
			c.Kind = kindEvictionBlocks
			_, err := openWire(keys, evictionBlocksCodec, c, to)
			return err
		}, "failed authentication"},
		{"labelled another kind", func() error {
			c := s
			c.Kind = kindEvictionBlocks
			return openAccess(keys, c, to)
		}, "it expects a access message"},
		{"under another key", func() error { return openAccess(otherKeys, s, to) }, "failed authentication"},
	} {
		err := tc.open()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: opened with %v, want an error saying %q", tc.name, err, tc.want)
		}
		if tc.want == "failed authentication" && !errors.Is(err, seal.ErrTampered) {
			t.Errorf("%s: %v is not seal.ErrTampered", tc.name, err)
		}
	}
}

func openAccess(keys *seal.Keys, s Sealed, at Endpoint) error {
	_, err := openWire(keys, accessCodec, s, at)
	return err
}

func flipped(s Sealed) Sealed {
	s.Body = bytes.Clone(s.Body)
	s.Body[len(s.Body)/2] ^= 1
	return s
}

// tampering is a network that alters the first copy of every message
// or, with replies set, of every reply, and delivers the rest as they
// are.
type tampering struct {
	replies  bool
	tampered atomic.Int64
}

func (n *tampering) carry(m Sealed, receive func(Sealed) Sealed, _ bool) (Sealed, Status) {
	first := n.tampered.Add(1)%2 == 1
	if first && !n.replies {
		m = flipped(m)
	}
	back := receive(m)
	if first && n.replies {
		back = flipped(back)
	}
	return back, Status{}
}

// TestSealedWireTampered: on a network that alters every other message
// (or reply), the receiver never handles an altered message and the
// sender never takes an altered reply: each is refused as lost in
// transit, naming the refusal, and the retry goes through.
func TestSealedWireTampered(t *testing.T) {
	for _, replies := range []bool{false, true} {
		t.Run(fmt.Sprint("replies=", replies), func(t *testing.T) {
			keys, handled := kvtest.NewKeys(t), 0
			w := sealedWire{keys: keys, net: &tampering{replies: replies}}
			shard := w.stash(2, stashFunc(func(m AccessMsg) AccessReply {
				handled++
				return AccessReply{Replies: []Reply{{Result: kv.Result{Found: true, Old: m.Batch[0].Value}}}}
			}))
			m := AccessMsg{ID: MsgID{Sender: Endpoint{LayerRouter, 0}, Epoch: 1}, Batch: []Request{{Value: []byte("v")}}}
			rep := shard.Access(m)
			if rep.Code != CodeTransport || !strings.Contains(rep.Detail, "refused") || !strings.Contains(rep.Detail, "failed authentication") {
				t.Fatalf("an altered exchange answered %+v; want CodeTransport naming the refusal", rep.Status)
			}
			if want := map[bool]int{false: 0, true: 1}[replies]; handled != want {
				t.Fatalf("the receiver handled %d messages, want %d", handled, want)
			}
			rep = shard.Access(m)
			if rep.Code != CodeOK || string(rep.Replies[0].Old) != "v" {
				t.Fatalf("the retry answered %+v", rep)
			}
		})
	}
}

type stashFunc func(AccessMsg) AccessReply

func (f stashFunc) Access(m AccessMsg) AccessReply { return f(m) }

// TestWireLinearizable: a store whose layers talk over the sealed wire
// (TestingKnobs.Wire) is linearizable (checkLinearizableOn).
func TestWireLinearizable(t *testing.T) {
	k := TestingKnobs{Wire: true}
	if w, ok := transportOf(k, kvtest.NewKeys(t)).(sealedWire); !ok || w.net != (inProcess{}) {
		t.Fatal("TestingKnobs.Wire does not put the layers on the sealed wire")
	}
	checkLinearizableOn(t, k)
}

// checkLinearizableOn checks that a store whose layers talk as k says is
// linearizable under 16 clients with frequent evictions, and returns it,
// open.
func checkLinearizableOn(t *testing.T, k TestingKnobs) kv.Store {
	t.Helper()
	o := Options{A: 2, K: 3, Epoch: 200 * time.Microsecond, TestingKnobs: k}
	s := kvtest.OpenStore(t, kvtest.Config{Protocol: "treebeard", Options: o}, kvtest.Mem())
	kvtest.CheckLinearizable(t, s, kvtest.LinOptions{Clients: 16, OpsPerClient: 100, DeleteFraction: 0.15, MutationFraction: 0.4})
	return s
}

// BenchmarkSealedWire measures what the sealed wire adds to one epoch's
// messages: a Router's batch of 16 Puts of 1 KiB values, and a tree's
// reply of 16 blocks of 1 KiB, each sealed and opened.
func BenchmarkSealedWire(b *testing.B) {
	keys, err := seal.NewKeys(bytes.Repeat([]byte{1}, seal.MasterKeySize))
	if err != nil {
		b.Fatal(err)
	}
	id := MsgID{Sender: Endpoint{LayerRouter, 0}, Incarnation: 1, Epoch: 1 << 48}
	to := Endpoint{LayerStash, 1}
	batch := AccessMsg{ID: id}
	reads := ReadPathsReply{}
	for i := range 16 {
		batch.Batch = append(batch.Batch, Request{Req: RequestID{Seq: uint64(i)}, Op: OpPut, ID: tree.BlockID{byte(i)}, Value: make([]byte, 1024)})
		reads.Results = append(reads.Results, ringoram.ReadResult{Block: tree.Block{ID: tree.BlockID{byte(i)}, Value: make([]byte, 1024)}, Found: true})
	}
	b.Run("AccessMsg", func(b *testing.B) { benchSealed(b, keys, accessCodec, id, to, batch) })
	b.Run("ReadPathsReply", func(b *testing.B) { benchSealed(b, keys, readPathsReplyCodec, id, to, reads) })
}

func benchSealed[V any](b *testing.B, keys *seal.Keys, c wireCodec[V], id MsgID, to Endpoint, v V) {
	b.ReportAllocs()
	b.SetBytes(int64(len(c.encode(v))))
	for b.Loop() {
		if _, err := openWire(keys, c, sealWire(keys, c, id, id.Sender, to, v), to); err != nil {
			b.Fatal(err)
		}
	}
}
