package tree

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/kvtest"
)

func randomBlocks(r *rand.Rand, n, valueSize int) []Block {
	blocks := make([]Block, n)
	for i := range blocks {
		for j := range blocks[i].ID {
			blocks[i].ID[j] = byte(r.UintN(256))
		}
		v := make([]byte, r.IntN(valueSize+1))
		for j := range v {
			v[j] = byte(r.UintN(256))
		}
		blocks[i].Value = v
	}
	return blocks
}

func sameBlocks(a, b []Block) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

func TestCodecRoundTrip(t *testing.T) {
	keys := kvtest.NewKeys(t)
	r := rand.New(rand.NewPCG(3, 3))
	for _, shape := range []struct{ slots, valueSize int }{{4, 100}, {1, 16}, {7, 0}, {4, 1024}} {
		c := NewCodec(keys, shape.slots, shape.valueSize)
		if c.BucketSize() != shape.slots*c.SlotSize() || c.SlotSize() <= shape.valueSize {
			t.Fatalf("%+v: slot size %d, bucket size %d", shape, c.SlotSize(), c.BucketSize())
		}
		for range 50 {
			n := r.IntN(shape.slots + 1)
			blocks := randomBlocks(r, n, shape.valueSize)
			addr, version := fmt.Sprintf("t/%d", r.IntN(1000)), r.Uint64()
			data, err := c.EncodeBucket(addr, version, blocks)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) != c.BucketSize() {
				t.Fatalf("%+v: %d blocks encode to %d bytes; want %d whatever the number of real blocks", shape, n, len(data), c.BucketSize())
			}
			got, err := c.DecodeBucket(addr, version, data)
			if err != nil || !sameBlocks(got, blocks) {
				t.Fatalf("%+v: round trip of %d blocks = %d blocks, %v", shape, n, len(got), err)
			}
		}
	}
}

func TestCodecEmptyValueIsReal(t *testing.T) {
	c := NewCodec(kvtest.NewKeys(t), 2, 8)
	blocks := []Block{{ID: BlockID{1}, Value: nil}, {ID: BlockID{}, Value: []byte{}}}
	data, err := c.EncodeBucket("a", 0, blocks)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.DecodeBucket("a", 0, data)
	if err != nil || len(got) != 2 || len(got[0].Value) != 0 || got[0].ID != (BlockID{1}) {
		t.Fatalf("empty values with a zero ID: decoded %+v, %v; want two real blocks", got, err)
	}
}

// Decoded values do not share capacity, so appending to one cannot
// overwrite the next.
func TestCodecValuesDoNotAlias(t *testing.T) {
	c := NewCodec(kvtest.NewKeys(t), 2, 8)
	data, err := c.EncodeBucket("a", 0, []Block{{ID: BlockID{1}, Value: []byte("ab")}, {ID: BlockID{2}, Value: []byte("cd")}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.DecodeBucket("a", 0, data)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got[0].Value, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	if string(got[1].Value) != "cd" {
		t.Fatalf("appending to one decoded value changed the next to %q", got[1].Value)
	}
}

func TestCodecFreshEncryption(t *testing.T) {
	c := NewCodec(kvtest.NewKeys(t), 4, 32)
	a, _ := c.EncodeBucket("a", 1, nil)
	b, _ := c.EncodeBucket("a", 1, nil)
	if bytes.Equal(a, b) {
		t.Fatal("two encodings of the same bucket are identical; want fresh randomness")
	}
	for i := range 4 {
		s := c.SlotSize()
		if bytes.Equal(a[i*s:(i+1)*s], a[((i+1)%4)*s:((i+1)%4+1)*s]) {
			t.Fatalf("dummy slots %d and %d are identical", i, (i+1)%4)
		}
	}
}

func TestCodecLimits(t *testing.T) {
	c := NewCodec(kvtest.NewKeys(t), 2, 8)
	r := rand.New(rand.NewPCG(4, 4))
	if _, err := c.EncodeBucket("a", 0, randomBlocks(r, 3, 8)); err == nil {
		t.Error("EncodeBucket of 3 blocks into 2 slots succeeded")
	}
	if _, err := c.EncodeBucket("a", 0, []Block{{Value: make([]byte, 9)}}); err == nil {
		t.Error("EncodeBucket of a 9-byte value with value size 8 succeeded")
	}
	for _, n := range []int{1, 3} {
		if _, err := c.EncodeSlots(nil, "a", 0, make([]*Block, n)); err == nil {
			t.Errorf("EncodeSlots of %d slots into a bucket of 2 succeeded", n)
		}
	}
	if _, err := c.EncodeSlots(nil, "a", 0, []*Block{nil, {Value: make([]byte, 9)}}); err == nil {
		t.Error("EncodeSlots of a 9-byte value with value size 8 succeeded")
	}
	if _, _, err := c.DecodeSlot("a", 0, -1, make([]byte, c.SlotSize())); err == nil {
		t.Error("DecodeSlot of slot -1 succeeded")
	}
}

// Every kind of tampering gives ErrTampered.
func TestCodecTamper(t *testing.T) {
	keys := kvtest.NewKeys(t)
	c := NewCodec(keys, 4, 40)
	r := rand.New(rand.NewPCG(5, 5))
	blocks := randomBlocks(r, 3, 40)
	data, err := c.EncodeBucket("t/7", 9, blocks)
	if err != nil {
		t.Fatal(err)
	}
	s := c.SlotSize()
	swapped := bytes.Clone(data)
	copy(swapped[:s], data[s:2*s])
	copy(swapped[s:2*s], data[:s])
	other, _ := NewCodec(kvtest.NewKeys(t), 4, 40).EncodeBucket("t/7", 9, blocks)
	for _, tc := range []struct {
		name    string
		addr    string
		version uint64
		data    []byte
	}{
		{"wrong address", "t/8", 9, data},
		{"wrong version (replay)", "t/7", 8, data},
		{"slots swapped", "t/7", 9, swapped},
		{"truncated", "t/7", 9, data[:len(data)-1]},
		{"one slot missing", "t/7", 9, data[:len(data)-s]},
		{"extended", "t/7", 9, append(bytes.Clone(data), 0)},
		{"empty", "t/7", 9, nil},
		{"another key", "t/7", 9, other},
	} {
		if _, err := c.DecodeBucket(tc.addr, tc.version, tc.data); !errors.Is(err, kv.ErrTampered) {
			t.Errorf("%s: DecodeBucket error %v; want kv.ErrTampered", tc.name, err)
		}
	}
	for range 200 {
		bit := r.IntN(8 * len(data))
		flipped := bytes.Clone(data)
		flipped[bit/8] ^= 1 << (bit % 8)
		if _, err := c.DecodeBucket("t/7", 9, flipped); !errors.Is(err, kv.ErrTampered) {
			t.Fatalf("bit %d flipped: DecodeBucket error %v; want kv.ErrTampered", bit, err)
		}
	}
	if _, err := c.DecodeBucket("t/7", 9, data); err != nil {
		t.Fatalf("the untampered bucket fails to decode: %v", err)
	}
}

// A bucket encoded with its blocks in chosen slots decodes slot by slot
// and as a whole.
func TestCodecSlots(t *testing.T) {
	c := NewCodec(kvtest.NewKeys(t), 3, 16)
	b := Block{ID: BlockID{7}, Value: []byte("value")}
	bucket, err := c.EncodeSlots([]byte("prefix"), "s", 4, []*Block{nil, &b, nil})
	if err != nil {
		t.Fatal(err)
	}
	if string(bucket[:6]) != "prefix" || len(bucket) != 6+c.BucketSize() {
		t.Fatalf("bucket of %d bytes after a 6-byte prefix; want the prefix kept and %d", len(bucket)-6, c.BucketSize())
	}
	bucket = bucket[6:]
	s := c.SlotSize()
	real, dummy := bucket[s:2*s], bucket[2*s:]
	got, isReal, err := c.DecodeSlot("s", 4, 1, real)
	if err != nil || !isReal || got.ID != b.ID || string(got.Value) != "value" {
		t.Fatalf("DecodeSlot(real) = %+v, %v, %v", got, isReal, err)
	}
	for _, slot := range []int{0, 2} {
		if _, isReal, err := c.DecodeSlot("s", 4, slot, bucket[slot*s:(slot+1)*s]); err != nil || isReal {
			t.Fatalf("DecodeSlot(dummy slot %d) = real %v, %v; want a dummy", slot, isReal, err)
		}
	}
	if _, _, err := c.DecodeSlot("s", 4, 2, real); !errors.Is(err, kv.ErrTampered) {
		t.Fatalf("slot 1 decoded as slot 2: %v; want kv.ErrTampered", err)
	}
	if _, _, err := c.DecodeSlot("s", 5, 2, dummy); !errors.Is(err, kv.ErrTampered) {
		t.Fatalf("slot decoded under another version: %v; want kv.ErrTampered", err)
	}
	blocks, err := c.DecodeBucket("s", 4, bucket)
	if err != nil || len(blocks) != 1 || blocks[0].ID != b.ID || string(blocks[0].Value) != "value" {
		t.Fatalf("bucket of slots encoded in place: %+v, %v", blocks, err)
	}
}

func TestIDOf(t *testing.T) {
	keys := kvtest.NewKeys(t)
	if IDOf(keys, "a") != IDOf(keys, "a") || IDOf(keys, "a") == IDOf(keys, "b") || IDOf(keys, "") == IDOf(keys, "\x00") {
		t.Fatal("IDOf is not a function of the key, or collides on distinct keys")
	}
	if IDOf(keys, "a") == IDOf(kvtest.NewKeys(t), "a") {
		t.Fatal("IDOf does not depend on the key material")
	}
	if id := IDOf(keys, "a"); BlockID(keys.PRF([]byte("a"))) == id {
		t.Fatal("IDOf equals the bare PRF of the key; want a separate domain")
	}
}
