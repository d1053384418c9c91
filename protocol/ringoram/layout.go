package ringoram

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Layout maps a tree's buckets to backend addresses. Every slot is its own
// address, so the storage operator sees exactly which slot of a bucket is
// read; the metadata of a bucket has an address of its own beside them:
//
//	metadata: Prefix "m" bucket (8 bytes, big-endian)
//	slot:     Prefix "s" bucket (8 bytes, big-endian) slot (1 byte)
//
// Trees sharing storage use distinct prefixes.
type Layout struct{ Prefix string }

const (
	metaTag = 'm'
	slotTag = 's'
)

// MetaAddr returns the address of bucket's metadata.
func (l Layout) MetaAddr(bucket uint64) string {
	var b [9]byte
	b[0] = metaTag
	binary.BigEndian.PutUint64(b[1:], bucket)
	return l.Prefix + string(b[:])
}

// SlotAddr returns the address of slot slot of bucket.
func (l Layout) SlotAddr(bucket uint64, slot int) string {
	var b [10]byte
	b[0] = slotTag
	binary.BigEndian.PutUint64(b[1:], bucket)
	b[9] = byte(slot)
	return l.Prefix + string(b[:])
}

// BucketAddr returns the address bucket's slots are sealed under
// (tree.Codec binds it with the slot index and the slot version). Nothing
// is stored at it.
func (l Layout) BucketAddr(bucket uint64) string {
	var b [9]byte
	b[0] = slotTag
	binary.BigEndian.PutUint64(b[1:], bucket)
	return l.Prefix + string(b[:])
}

// ParseMeta returns the bucket whose metadata addr is, and false when addr
// is not a metadata address of this layout.
func (l Layout) ParseMeta(addr string) (bucket uint64, ok bool) {
	rest, ok := strings.CutPrefix(addr, l.Prefix)
	if !ok || len(rest) != 9 || rest[0] != metaTag {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(rest[1:])), true
}

// ParseSlot returns the bucket and slot addr is, and false when addr is
// not a slot address of this layout.
func (l Layout) ParseSlot(addr string) (bucket uint64, slot int, ok bool) {
	rest, ok := strings.CutPrefix(addr, l.Prefix)
	if !ok || len(rest) != 10 || rest[0] != slotTag {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64([]byte(rest[1:9])), int(rest[9]), true
}

// describe names an address of the layout in an error.
func (l Layout) describe(addr string) string {
	if b, ok := l.ParseMeta(addr); ok {
		return fmt.Sprintf("metadata of bucket %d", b)
	}
	if b, s, ok := l.ParseSlot(addr); ok {
		return fmt.Sprintf("slot %d of bucket %d", s, b)
	}
	return fmt.Sprintf("address %q", addr)
}
