package tree

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/oblivkv/oblivkv/seal"
)

// Slot plaintext layout: kind (1 byte), block ID, value length (4 bytes,
// big-endian), value padded with zeros to the value size. A dummy slot has
// kind 0 and zeros everywhere else; sealed, both kinds have the same size.
const (
	kindDummy  = 0
	kindReal   = 1
	slotHeader = 1 + len(BlockID{}) + 4
)

// Codec seals buckets of a fixed number of slots. Each slot is sealed
// separately with associated data binding it to the bucket's address, its
// index in the bucket and the bucket's version, so a slot cannot be moved
// within or across buckets or replayed from an older version. Where the
// version is kept is the caller's business (a versioned backend stores it
// beside the value; a protocol may keep it in trusted memory); the Codec
// only binds it.
//
// A bucket on storage is its slots concatenated: slot i is
// data[i*SlotSize() : (i+1)*SlotSize()]. A Codec is safe for concurrent use.
type Codec struct {
	keys      *seal.Keys
	slots     int
	valueSize int
	plainSize int
	slotSize  int
	plains    sync.Pool // *[]byte of plainSize: a bucket encoding's slot plaintext
	leak      leak      // tests only (leak.go)
}

// NewCodec returns a Codec for buckets of slots slots holding values of at
// most valueSize bytes.
func NewCodec(keys *seal.Keys, slots, valueSize int) *Codec {
	if slots < 1 || valueSize < 0 {
		panic(fmt.Sprintf("tree: NewCodec(%d slots, value size %d)", slots, valueSize))
	}
	plain := slotHeader + valueSize
	c := &Codec{keys: keys, slots: slots, valueSize: valueSize,
		plainSize: plain, slotSize: plain + keys.Overhead(), leak: leak(injected.Load())}
	c.plains.New = func() any {
		b := make([]byte, plain)
		return &b
	}
	return c
}

// ValueSize returns the largest value a block may hold.
func (c *Codec) ValueSize() int { return c.valueSize }

// SlotSize returns the size in bytes of one sealed slot, real or dummy.
func (c *Codec) SlotSize() int { return c.slotSize }

// BucketSize returns the size in bytes of one sealed bucket.
func (c *Codec) BucketSize() int { return c.slots * c.slotSize }

// ad returns the associated data of a bucket's slots with room for the
// slot index, which setSlot fills in: version, slot, address. The address
// comes last, so the fixed-size fields cannot be confused with it.
func (c *Codec) ad(addr string, version uint64) []byte {
	if c.leak == leakUnboundAddress {
		addr = ""
	}
	return slotAD(addr, version, 0)
}

// slotAD is the associated data of slot slot of the bucket at addr,
// version version.
func slotAD(addr string, version uint64, slot int) []byte {
	b := make([]byte, 12, 12+len(addr))
	binary.BigEndian.PutUint64(b, version)
	binary.BigEndian.PutUint32(b[8:], uint32(slot))
	return append(b, addr...)
}

func setSlot(ad []byte, slot int) { binary.BigEndian.PutUint32(ad[8:12], uint32(slot)) }

// EncodeBucket returns the sealed bucket holding blocks (real blocks
// first, then dummy slots). It fails when there are more blocks than slots
// or a value is longer than the value size.
func (c *Codec) EncodeBucket(addr string, version uint64, blocks []Block) ([]byte, error) {
	if len(blocks) > c.slots {
		return nil, fmt.Errorf("tree: %d blocks for a bucket of %d slots", len(blocks), c.slots)
	}
	out := make([]byte, 0, c.BucketSize())
	a, plain := c.ad(addr, version), c.plains.Get().(*[]byte)
	defer c.plains.Put(plain)
	for i := range c.slots {
		var b *Block
		if i < len(blocks) {
			b = &blocks[i]
		}
		var err error
		if out, err = c.sealSlot(out, a, *plain, i, b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EncodeSlots appends to dst the sealed bucket at addr, version version,
// whose slot i holds slots[i] (nil: a dummy slot), for a caller that
// chooses the slot of each block (Ring ORAM's permuted buckets). slots
// must have one entry per slot of the bucket.
func (c *Codec) EncodeSlots(dst []byte, addr string, version uint64, slots []*Block) ([]byte, error) {
	if len(slots) != c.slots {
		return dst, fmt.Errorf("tree: %d slots for a bucket of %d slots", len(slots), c.slots)
	}
	a, plain := c.ad(addr, version), c.plains.Get().(*[]byte)
	defer c.plains.Put(plain)
	for i, b := range slots {
		var err error
		if dst, err = c.sealSlot(dst, a, *plain, i, b); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// sealSlot fills plain (plainSize bytes of scratch) with b and appends it
// sealed to dst.
func (c *Codec) sealSlot(dst, ad, plain []byte, slot int, b *Block) ([]byte, error) {
	clear(plain)
	if b != nil {
		if len(b.Value) > c.valueSize {
			return dst, fmt.Errorf("tree: %d-byte value for a slot of %d bytes", len(b.Value), c.valueSize)
		}
		plain[0] = kindReal
		copy(plain[1:], b.ID[:])
		binary.BigEndian.PutUint32(plain[1+len(b.ID):], uint32(len(b.Value)))
		copy(plain[slotHeader:], b.Value)
	}
	setSlot(ad, slot)
	return c.keys.Seal(dst, ad, plain), nil
}

// DecodeBucket returns the real blocks of a sealed bucket, or an error
// wrapping seal.ErrTampered (kv.ErrTampered) when any slot fails to
// authenticate under addr and version or the bucket has the wrong length.
// The blocks' values share one buffer, owned by the caller.
func (c *Codec) DecodeBucket(addr string, version uint64, data []byte) ([]Block, error) {
	if len(data) != c.BucketSize() {
		return nil, fmt.Errorf("%w: bucket %q is %d bytes, want %d", seal.ErrTampered, addr, len(data), c.BucketSize())
	}
	a := c.ad(addr, version)
	dst := make([]Block, 0, c.slots)
	plain := make([]byte, 0, c.slots*c.plainSize)
	for i := range c.slots {
		b, real, err := c.openSlot(plain[len(plain):len(plain)], a, i, data[i*c.slotSize:(i+1)*c.slotSize])
		if err != nil {
			return nil, fmt.Errorf("bucket %q slot %d: %w", addr, i, err)
		}
		plain = plain[:len(plain)+c.plainSize]
		if real {
			dst = append(dst, b)
		}
	}
	return dst, nil
}

// DecodeSlot opens one sealed slot of the bucket at addr, version version,
// and returns its block and whether it is a real block.
func (c *Codec) DecodeSlot(addr string, version uint64, slot int, data []byte) (Block, bool, error) {
	if slot < 0 || slot >= c.slots {
		return Block{}, false, fmt.Errorf("tree: slot %d of a bucket of %d slots", slot, c.slots)
	}
	if len(data) != c.slotSize {
		return Block{}, false, fmt.Errorf("%w: slot is %d bytes, want %d", seal.ErrTampered, len(data), c.slotSize)
	}
	return c.openSlot(nil, c.ad(addr, version), slot, data)
}

// openSlot opens data into dst (which must have room for plainSize bytes
// to avoid an allocation) and parses it.
func (c *Codec) openSlot(dst, ad []byte, slot int, data []byte) (Block, bool, error) {
	setSlot(ad, slot)
	plain, err := c.keys.Open(dst, ad, data)
	if err != nil {
		return Block{}, false, err
	}
	if len(plain) != c.plainSize {
		return Block{}, false, fmt.Errorf("%w: slot plaintext is %d bytes, want %d", seal.ErrTampered, len(plain), c.plainSize)
	}
	switch plain[0] {
	case kindDummy:
		return Block{}, false, nil
	case kindReal:
	default:
		return Block{}, false, fmt.Errorf("%w: slot of unknown kind %d", seal.ErrTampered, plain[0])
	}
	var b Block
	copy(b.ID[:], plain[1:])
	n := binary.BigEndian.Uint32(plain[1+len(b.ID):])
	if int64(n) > int64(c.valueSize) {
		return Block{}, false, fmt.Errorf("%w: slot value of %d bytes, value size %d", seal.ErrTampered, n, c.valueSize)
	}
	b.Value = plain[slotHeader : slotHeader+int(n) : slotHeader+int(n)]
	return b, true, nil
}

// ResealSlot appends to dst the slot sealed at data, slot slot of the
// bucket at addr, version version, sealed afresh under to (seal.Reseal:
// it opens under from, or under to for a slot already re-sealed), for
// `oblivkv rekey`. The version is wherever its protocol keeps it.
func ResealSlot(from, to *seal.Keys, dst []byte, addr string, version uint64, slot int, data []byte) ([]byte, error) {
	out, err := seal.Reseal(from, to, dst, slotAD(addr, version, slot), data)
	if err != nil {
		return nil, fmt.Errorf("bucket %q slot %d: %w", addr, slot, err)
	}
	return out, nil
}

// ResealBucket returns the bucket sealed at data (every slot bound to addr
// and version, as EncodeBucket seals it, each slot slotSize bytes) sealed
// afresh under to (see ResealSlot).
func ResealBucket(from, to *seal.Keys, addr string, version uint64, slotSize int, data []byte) ([]byte, error) {
	if slotSize <= 0 || len(data)%slotSize != 0 {
		return nil, fmt.Errorf("%w: bucket %q is %d bytes, not whole slots of %d", seal.ErrTampered, addr, len(data), slotSize)
	}
	out := make([]byte, 0, len(data))
	for i := range len(data) / slotSize {
		var err error
		if out, err = ResealSlot(from, to, out, addr, version, i, data[i*slotSize:(i+1)*slotSize]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SlotSize returns the size of a sealed slot of values of valueSize bytes
// under keys (Codec.SlotSize, without a Codec).
func SlotSize(keys *seal.Keys, valueSize int) int { return slotHeader + valueSize + keys.Overhead() }
