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
func (l Layout) MetaAddr(bucket uint64) string { return l.addr(metaTag, bucket) }

// SlotAddr returns the address of slot slot of bucket: bucketAddr followed
// by the slot.
func (l Layout) SlotAddr(bucket uint64, slot int) string {
	return l.addr(slotTag, bucket, byte(slot))
}

// bucketAddr returns the address bucket's slots are sealed under
// (tree.Codec binds it with the slot index and the slot version). Nothing
// is stored at it.
func (l Layout) bucketAddr(bucket uint64) string { return l.addr(slotTag, bucket) }

// addr returns Prefix, tag, bucket (8 bytes, big-endian) and slot (none or
// one byte).
func (l Layout) addr(tag byte, bucket uint64, slot ...byte) string {
	var b [10]byte
	b[0] = tag
	binary.BigEndian.PutUint64(b[1:], bucket)
	n := 9 + copy(b[9:], slot)
	return l.Prefix + string(b[:n])
}

// ParseMeta returns the bucket whose metadata addr is, and false when addr
// is not a metadata address of this layout.
func (l Layout) ParseMeta(addr string) (bucket uint64, ok bool) {
	bucket, _, ok = l.parse(addr, metaTag, 0)
	return bucket, ok
}

// ParseSlot returns the bucket and slot addr is, and false when addr is
// not a slot address of this layout.
func (l Layout) ParseSlot(addr string) (bucket uint64, slot int, ok bool) {
	bucket, rest, ok := l.parse(addr, slotTag, 1)
	if !ok {
		return 0, 0, false
	}
	return bucket, int(rest[0]), true
}

// parse splits an address of l with tag followed by a bucket and n more
// bytes, returned as rest.
func (l Layout) parse(addr string, tag byte, n int) (bucket uint64, rest string, ok bool) {
	tail, ok := strings.CutPrefix(addr, l.Prefix)
	if !ok || len(tail) != 9+n || tail[0] != tag {
		return 0, "", false
	}
	return binary.BigEndian.Uint64([]byte(tail[1:9])), tail[9:], true
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
