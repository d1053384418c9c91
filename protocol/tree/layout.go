package tree

import (
	"encoding/binary"
	"strings"
)

// Layout maps buckets to backend addresses: Prefix followed by the bucket
// number as 8 big-endian bytes. Addresses of one tree share the prefix, so
// several trees (or protocols) can share storage with distinct prefixes.
// The prefix must not begin with "meta/" (reserved by package kv).
type Layout struct{ Prefix string }

// Addr returns the address of bucket.
func (l Layout) Addr(bucket uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], bucket)
	return l.Prefix + string(b[:])
}

// Addrs appends to dst[:0] the addresses of buckets and returns it.
func (l Layout) Addrs(buckets []uint64, dst []string) []string {
	dst = dst[:0]
	for _, b := range buckets {
		dst = append(dst, l.Addr(b))
	}
	return dst
}

// Bucket returns the bucket an address names, and false when it is not an
// address of this layout.
func (l Layout) Bucket(addr string) (uint64, bool) {
	rest, ok := strings.CutPrefix(addr, l.Prefix)
	if !ok || len(rest) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(rest)), true
}
